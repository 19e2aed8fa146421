package spec

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// tokenPrefix starts every join token, so a token is recognisable and its
// format can change later.
const tokenPrefix = "mesh1."

// Token is what `mesh token create` prints and `mesh host --join` reads: where
// the mesh's bus is, the pin of the root its certificate must chain to, and
// the secret of a one-time enrolment user.
type Token struct {
	Mesh string   `json:"mesh"`
	ID   string   `json:"id"`
	Node string   `json:"node"`
	Pin  string   `json:"pin"`
	Bus  []string `json:"bus"`
	// Secret is the nkey seed of the token's enrolment user, which may
	// publish mesh.enrol and nothing else.
	Secret  string    `json:"secret"`
	Expires time.Time `json:"expires"`
	// Controller marks a token that enrols a controller of the mesh
	// with its node (mesh controller --join); Bus is every
	// controller's bus then.
	Controller bool `json:"controller,omitempty"`
}

// Encode renders t as one line of text.
func (t Token) Encode() string {
	body, _ := json.Marshal(t)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(body)
}

// ParseToken reads a token and checks that every field is there. It does not
// check expiry, which needs a clock.
func ParseToken(s string) (Token, error) {
	var t Token
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), tokenPrefix)
	if !ok {
		return t, fmt.Errorf("malformed token: it does not begin with %q (copy the whole line mesh token create printed)", tokenPrefix)
	}
	body, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return t, fmt.Errorf("malformed token: %v (copy the whole line mesh token create printed)", err)
	}
	if err := Decode(body, &t); err != nil {
		return t, fmt.Errorf("malformed token: %v", err)
	}
	switch {
	case t.ID == "" || t.Secret == "" || t.Pin == "" || len(t.Bus) == 0 || t.Expires.IsZero():
		return t, fmt.Errorf("malformed token: a field is missing")
	case !strings.HasPrefix(t.Pin, "sha256:"):
		return t, fmt.Errorf("malformed token: the CA pin %q is not sha256:HEX", t.Pin)
	}
	if err := CheckName("mesh", t.Mesh); err != nil {
		return t, fmt.Errorf("malformed token: %w", err)
	}
	if err := CheckName("node", t.Node); err != nil {
		return t, fmt.Errorf("malformed token: %w", err)
	}
	return t, nil
}

// EnrolInbox is the inbox prefix of a joining host's enrolment connection.
func EnrolInbox(tokenID string) string { return "_INBOX._enrol." + tokenID }

// EnrolPermissions is everything a token's enrolment user may do: publish
// one enrolment request and receive its reply.
func EnrolPermissions(tokenID string) Permissions {
	return Permissions{Publish: []string{EnrolSubject}, Subscribe: []string{EnrolInbox(tokenID) + ".>"}}
}

// EnrolRequest is what a joining host sends on mesh.enrol: its node's public
// key (never the seed), its sealing public key, where it is reached, and
// its facts. Proof is the token secret's signature over ProofBytes,
// binding the request, its keys with it, to the token.
type EnrolRequest struct {
	// Protocol is the protocol the joining host speaks: a controller of
	// another refuses the join (JoinRefusal), reading this field before
	// any other.
	Protocol int    `json:"protocol"`
	TokenID  string `json:"token_id"`
	Node     string `json:"node"`
	NKey     string `json:"nkey"`
	// SealKey is the public half of the key pair the host made at this
	// join ("x25519:" and base64url): what the controller seals a value
	// to so that only this node opens it. The private half stays in the
	// host's directory.
	SealKey string `json:"seal_key"`
	// WGKey is the public half of the WireGuard key pair the host made at
	// this join (standard base64, as wg(8) prints it): its key on the
	// overlay. The private half stays in the host's directory.
	WGKey   string `json:"wg_key"`
	Address string `json:"address"`
	Facts   Facts  `json:"facts"`
	// Controller is set when a controller joins with its node: what
	// its bus is in the controllers' cluster. The shared keys are
	// sealed to SealKey.
	Controller *ControllerJoin `json:"controller,omitempty"`
	Proof      []byte          `json:"proof"`
}

// ControllerJoin is what a joining controller's bus is in the
// controllers' cluster: its server's new name, where its routes
// listen, and its bus's URL (what hosts dial).
type ControllerJoin struct {
	Server string `json:"server"`
	Route  string `json:"route"`
	Bus    string `json:"bus"`
}

// ProofBytes are the bytes an enrolment request's proof signs.
func (r EnrolRequest) ProofBytes() []byte {
	b := "mesh-enrol\x00" + r.TokenID + "\x00" + r.Node + "\x00" + r.NKey + "\x00" + r.Address + "\x00" + r.SealKey + "\x00" + r.WGKey
	if c := r.Controller; c != nil {
		b += "\x00controller\x00" + c.Server + "\x00" + c.Route + "\x00" + c.Bus
	}
	return []byte(b)
}

// EnrolResult is the controller's answer to a successful enrolment.
type EnrolResult struct {
	Mesh string `json:"mesh"`
	Node string `json:"node"`
	// SignKey is the controller's ed25519 public key, base64.
	SignKey string   `json:"sign_key"`
	Bus     []string `json:"bus"`
	// Controller is the answer to a controller's join: the keys every
	// controller shares and the cluster's state, sealed to the
	// request's SealKey.
	Controller string `json:"controller,omitempty"`
}

// TokenCreateRequest asks for a join token for a node not yet in the mesh.
type TokenCreateRequest struct {
	Node string        `json:"node"`
	TTL  time.Duration `json:"ttl"`
	// Controller asks for a token that enrols a controller with its
	// node.
	Controller bool `json:"controller,omitempty"`
}

// TokenCreateResult carries the token, whose enrolment user is already in
// force on the bus.
type TokenCreateResult struct {
	ID      string    `json:"id"`
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// TokenInfo is a token as `mesh token list` shows it: never its secret.
type TokenInfo struct {
	ID         string     `json:"id"`
	Node       string     `json:"node"`
	Created    time.Time  `json:"created"`
	Expires    time.Time  `json:"expires"`
	Used       *time.Time `json:"used"`
	Revoked    *time.Time `json:"revoked"`
	Controller bool       `json:"controller,omitempty"`
}

// TokenListRequest asks for the open tokens.
type TokenListRequest struct {
	All bool `json:"all"` // also the used, revoked and expired
}

// TokenListResult lists tokens.
type TokenListResult struct {
	Tokens []TokenInfo `json:"tokens"`
}

// TokenRevokeRequest ends a token.
type TokenRevokeRequest struct {
	ID string `json:"id"`
}

// NodeRemoveRequest removes a node: its credential stops working at once.
type NodeRemoveRequest struct {
	Name string `json:"name"`
}

// NodeRemoveResult is what a removal did of the mesh's names: the roster
// it sent without the node (nil when none was sent: the roster held no
// name of it, or it could not be composed), and, when it could not,
// NamesKept, why: the hosts keep the names they hold, the node's among
// them, until the next push sends the roster.
type NodeRemoveResult struct {
	Roster    *PushRoster `json:"roster,omitempty"`
	NamesKept string      `json:"names_kept,omitempty"`
}

// Empty is the result of a call that returns nothing but success.
type Empty struct{}
