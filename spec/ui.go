package spec

import "time"

// API requests and results of the status page's access: mesh ui and mesh
// ui token.
type (
	// UILoginRequest asks for a link that signs a browser in to the
	// status page; Host, when set, is the machine's name or address the
	// link carries instead of the listener's.
	UILoginRequest struct {
		Host string `json:"host,omitempty"`
	}
	// UILoginResult is the link: it starts one session, once, until
	// Expires. Open says the listener is on loopback, where the page
	// needs no session: URL is then the page itself.
	UILoginResult struct {
		URL     string    `json:"url"`
		Expires time.Time `json:"expires,omitempty"`
		Open    bool      `json:"open,omitempty"`
	}
	// UITokenRequest asks for a new bearer token; Metrics is the only
	// kind: /metrics's, for a scraper off loopback.
	UITokenRequest struct {
		Metrics bool `json:"metrics"`
	}
	// UITokenResult is the token, which replaces the one before it. Open
	// says the listener is on loopback, where /metrics needs none.
	UITokenResult struct {
		Token string `json:"token"`
		Open  bool   `json:"open,omitempty"`
	}
)
