package mesh

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/web"
)

// uiAccess is who may read the HTTP listener (web.Gate), and the verbs
// that let an operator in: mesh ui and mesh ui token.
type uiAccess struct {
	gate *web.Gate
	// addr is where the HTTP listener bound.
	addr func() string
}

// MetricsTokenFile is where, in the controller's directory, the SHA-256
// of /metrics's bearer token is kept.
const MetricsTokenFile = "metrics-token.sha256"

// httpCertLifetime is how long the HTTP listener's certificate is valid:
// it is issued again at each start.
const httpCertLifetime = 365 * 24 * time.Hour

// onLoopback says listen (host:port) is a loopback address: the listener
// is then open, as /healthz always was. "localhost" is; an unspecified
// address (every interface) is not.
func onLoopback(listen string) bool {
	h, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// listenerTLS is the TLS of an HTTP listener off loopback: a certificate
// the mesh's CA issues for the listen address (every address of the
// machine when it listens on all of them) and, when the controller's
// machine is a node, its name in the mesh (NODE.internal): the CA signs
// no other name.
func listenerTLS(listen, node string, auth *ca.Authority) (*tls.Config, error) {
	h, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("http address %q: %w", listen, err)
	}
	var names []string
	if node != "" {
		names = append(names, spec.NodeName(node))
	}
	var ips []net.IP
	if ip := net.ParseIP(h); ip != nil && !ip.IsUnspecified() {
		ips = []net.IP{ip}
	} else {
		ips = append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, machineIPs()...)
	}
	cert, err := auth.IssueServer(names, ips, httpCertLifetime)
	if err != nil {
		return nil, fmt.Errorf("issue the HTTP listener's certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// machineIPs are the machine's addresses but loopback's.
func machineIPs() []net.IP {
	var ips []net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

// hostName is a machine's name a link may carry.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)

// login is mesh ui: a link that signs one browser in, once, within
// web.LoginLife; on loopback the page needs none, and the answer says so.
func (u *uiAccess) login(_ context.Context, req spec.UILoginRequest) (spec.UILoginResult, error) {
	addr := u.addr()
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return spec.UILoginResult{}, fmt.Errorf("the HTTP listener's address %q: %w", addr, err)
	}
	switch {
	case req.Host != "":
		if net.ParseIP(req.Host) == nil && !hostName.MatchString(req.Host) {
			return spec.UILoginResult{}, callerError(fmt.Sprintf("host %q: neither a machine's name nor an IP address", req.Host))
		}
		h = req.Host
	case net.ParseIP(h) != nil && net.ParseIP(h).IsUnspecified():
		// Listening on every address: the machine's first, which its
		// certificate names.
		if ips := machineIPs(); len(ips) > 0 {
			h = ips[0].String()
		}
	}
	page := url.URL{Scheme: "http", Host: net.JoinHostPort(h, port), Path: "/"}
	if u.gate.Open() {
		return spec.UILoginResult{URL: page.String(), Open: true}, nil
	}
	token, expires := u.gate.Login()
	page.Scheme, page.Path, page.RawQuery = "https", "/login", url.Values{"token": {token}}.Encode()
	return spec.UILoginResult{URL: page.String(), Expires: expires.UTC()}, nil
}

// token is mesh ui token --metrics: a bearer token for /metrics, which
// replaces the one before it.
func (u *uiAccess) token(_ context.Context, req spec.UITokenRequest) (spec.UITokenResult, error) {
	if !req.Metrics {
		return spec.UITokenResult{}, callerError("say which token: --metrics (the only kind there is)")
	}
	token, err := u.gate.MetricsToken()
	if err != nil {
		return spec.UITokenResult{}, err
	}
	return spec.UITokenResult{Token: token, Open: u.gate.Open()}, nil
}
