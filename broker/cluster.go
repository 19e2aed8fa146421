package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster makes the bus one server of a cluster: routes listen on Listen
// and dial every peer, over TLS both ways, each end presenting a
// certificate from the mesh's CA and verifying the other's against the
// mesh's root, and each route authorized by the cluster's credentials.
// The peers are a static set: a server learns of no other from them.
type Cluster struct {
	// Name is the cluster's name, the same on every server.
	Name string
	// ServerName is this server's name in the cluster: stable across its
	// restarts (JetStream knows its peers by it) and unique among them.
	ServerName string
	// Listen is host:port the routes listen on. Its port is fixed: the
	// peers dial it.
	Listen string
	// Peers are the route addresses, host:port, of the other servers. It
	// may hold this server's own Listen, which it skips.
	Peers []string
	// Cert is this server's route certificate, from the mesh's CA and
	// naming TLSName: presented when it accepts a route and when it dials
	// one.
	Cert tls.Certificate
	// Root is the mesh's root: a peer's certificate must verify against
	// it, through the intermediates the peer presents.
	Root *x509.Certificate
	// TLSName is the DNS name every server's route certificate carries.
	TLSName string
	// User and Password are the route credentials, the same on every
	// server: nats-server authorizes a route by a user and password only.
	User, Password string
}

// check says what in c cannot make a cluster.
func (c *Cluster) check() error {
	for _, n := range []struct{ what, v string }{{"cluster name", c.Name}, {"server name", c.ServerName}} {
		if n.v == "" || strings.ContainsAny(n.v, " \t\r\n") {
			return fmt.Errorf("bus: %s %q: want a name without spaces", n.what, n.v)
		}
	}
	if err := fixedAddr(c.Listen); err != nil {
		return fmt.Errorf("bus: cluster address: %w", err)
	}
	peers := c.others()
	if len(peers) == 0 {
		return errors.New("bus: a cluster with no peer")
	}
	for _, p := range peers {
		if err := fixedAddr(p); err != nil {
			return fmt.Errorf("bus: peer route address: %w", err)
		}
	}
	if len(c.Cert.Certificate) == 0 {
		return errors.New("bus: no route certificate")
	}
	if c.Root == nil {
		return errors.New("bus: no root to verify the peers' route certificates against")
	}
	if c.TLSName == "" {
		return errors.New("bus: no name the peers' route certificates carry")
	}
	if c.User == "" || c.Password == "" {
		return errors.New("bus: no route credentials (a user and a password)")
	}
	return nil
}

// fixedAddr checks addr is host:port with a host and a port other than 0.
func fixedAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w (want host:port)", addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535 (the peers dial it)", addr, port)
	}
	if host == "" {
		return fmt.Errorf("%q: no host", addr)
	}
	return nil
}

// others are the peers but this server's own address, each once.
func (c *Cluster) others() []string {
	var out []string
	for _, p := range c.Peers {
		if p != c.Listen && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// tlsConfig is the routes' TLS, the same config on both sides of a route:
// the dialing end verifies the peer's certificate for TLSName against the
// root; the accepting end requires the peer's certificate, verifies it
// against the root, then checks it names TLSName, so a leaf the CA issued
// for anything else (a host's) is not a peer.
func (c *Cluster) tlsConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(c.Root)
	name := c.TLSName
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{c.Cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ServerName:   name,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the route's peer presented no certificate")
			}
			if err := cs.PeerCertificates[0].VerifyHostname(name); err != nil {
				return fmt.Errorf("the route's peer certificate: %w", err)
			}
			return nil
		},
	}
}

// routePingEvery and routePingsOut: a route whose peer answers none of
// three pings a second apart is closed.
const (
	routePingEvery = time.Second
	routePingsOut  = 3
)

// apply sets c in opts: the server's name, the cluster's routes, their TLS
// and credentials.
func (c *Cluster) apply(opts *server.Options) error {
	host, portText, _ := net.SplitHostPort(c.Listen)
	port, _ := strconv.Atoi(portText)
	opts.ServerName = c.ServerName
	opts.Cluster.Name = c.Name
	opts.Cluster.Host = host
	opts.Cluster.Port = port
	opts.Cluster.Username = c.User
	opts.Cluster.Password = c.Password
	opts.Cluster.TLSConfig = c.tlsConfig()
	opts.Cluster.TLSTimeout = 5
	// A peer stopped but not closed (a paused process) keeps its routes
	// open, and the interest of its subscriptions with them: unanswered
	// pings end them within a TTL of the lease, so requests are not
	// routed to it for minutes.
	opts.Cluster.PingInterval = routePingEvery
	opts.Cluster.MaxPingsOut = routePingsOut
	// The peer set is static: clients are given the addresses they dial,
	// never those the routes gossip.
	opts.Cluster.NoAdvertise = true
	opts.Routes = nil
	for _, p := range c.others() {
		u, err := url.Parse("nats-route://" + p)
		if err != nil {
			return fmt.Errorf("bus: peer route address %q: %w", p, err)
		}
		u.User = url.UserPassword(c.User, c.Password)
		opts.Routes = append(opts.Routes, u)
	}
	return nil
}

// Peers are the names of the servers of the cluster the bus has a route
// to, sorted: none before Ready, or for a bus not in a cluster.
func (s *Server) Peers() []string {
	ns := s.NATS()
	if ns == nil {
		return nil
	}
	rz, err := ns.Routez(&server.RoutezOptions{})
	if err != nil {
		return nil
	}
	var names []string
	for _, r := range rz.Routes {
		if r.RemoteName != "" && !slices.Contains(names, r.RemoteName) {
			names = append(names, r.RemoteName)
		}
	}
	slices.Sort(names)
	return names
}
