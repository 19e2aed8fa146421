package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mesh-fleet/mesh/spec"
)

// The edge's timeouts: a client's request headers, an idle client
// connection, and a backend's dial, handshake and response headers.
const (
	edgeReadHeader    = 10 * time.Second
	edgeIdle          = 2 * time.Minute
	edgeBackendDial   = 10 * time.Second
	edgeBackendHeader = time.Minute
)

// edgeTimeouts are an edge's timeouts: readHeader for a client's request
// headers, idle for an idle connection (a client's or one kept to a
// backend), backendDial for a backend's dial and TLS handshake,
// backendHeader for a backend's response headers. A zero value is the
// constant of the same name; tests shorten them.
type edgeTimeouts struct {
	readHeader, idle, backendDial, backendHeader time.Duration
}

// orDefaults is t with each zero value the edge's constant.
func (t edgeTimeouts) orDefaults() edgeTimeouts {
	or := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	return edgeTimeouts{readHeader: or(t.readHeader, edgeReadHeader), idle: or(t.idle, edgeIdle),
		backendDial: or(t.backendDial, edgeBackendDial), backendHeader: or(t.backendHeader, edgeBackendHeader)}
}

// edge is the host's edge: what it serves is the public names of the held
// roster (take), how it serves them the edge resource it holds
// (configure). It outlives applies; the agent makes it once and stops it
// when its run ends. Safe from any goroutine.
type edge struct {
	dir    string // its storage: D/host/edge
	caRoot string // the mesh's root, PEM, that TLS backends are verified against
	log    *slog.Logger
	renew  edgeRenew // certmagic's defaults unless a test shortens them
	// timeouts are the edge's constants unless a test shortens them.
	timeouts edgeTimeouts

	mu     sync.Mutex
	names  map[string]edgeTarget // the held roster's public names
	serves *edgeServe            // nil: no edge resource held
	shared edgeShare             // the edges' bucket, when the host has the bus (edgestore.go)
}

// edgeTarget is where a public name goes: the route's internal name (what
// a TLS backend's certificate names), its node's address and port.
type edgeTarget struct {
	route            spec.RosterRoute // the public name's entry
	internal         string           // ROUTE.NODE.internal
	address          string
	port             int
	tls              bool
	module, nodeName string
}

// edgeRenew is when an edge renews its certificates: how often certmagic
// checks them (every) and the fraction of a certificate's lifetime left
// when it renews it (window). Zero values are certmagic's defaults (every
// 10 minutes, a third of the lifetime); tests of renewal, against a CA
// that issues certificates valid for a minute, shorten both.
type edgeRenew struct {
	every  time.Duration
	window float64
}

// newEdge is the host's edge, serving nothing until configured.
func newEdge(dir, caRoot string, log *slog.Logger) *edge {
	return &edge{dir: dir, caRoot: caRoot, log: log, names: map[string]edgeTarget{}}
}

// take makes the public names of r what the edge serves: a name that
// appears gets its certificate, one that leaves is no longer renewed.
func (g *edge) take(r spec.Roster) {
	if g == nil {
		return
	}
	names := edgeTargets(r)
	g.mu.Lock()
	g.names = names
	s := g.serves
	g.mu.Unlock()
	if s != nil {
		s.manage(names)
	}
}

// edgeTargets are r's public names, each with where it goes: the internal
// name of the route on its node is the entry of the same node, module and
// port that is not public.
func edgeTargets(r spec.Roster) map[string]edgeTarget {
	internal := map[string]string{}
	for _, rt := range r.Routes {
		if !rt.Public {
			internal[rt.Node+"\x00"+rt.Module+"\x00"+strconv.Itoa(rt.Port)] = rt.Name
		}
	}
	out := map[string]edgeTarget{}
	for _, rt := range r.Routes {
		if !rt.Public {
			continue
		}
		in := internal[rt.Node+"\x00"+rt.Module+"\x00"+strconv.Itoa(rt.Port)]
		if in == "" {
			in = spec.NodeName(rt.Node)
		}
		out[strings.ToLower(rt.Name)] = edgeTarget{route: rt, internal: in, address: rt.Address, port: rt.Port, tls: rt.TLS, module: rt.Module, nodeName: rt.Node}
	}
	return out
}

// target is where name goes, if the held roster serves it.
func (g *edge) target(name string) (edgeTarget, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.names[strings.ToLower(name)]
	return t, ok
}

// backend is the address of the route whose internal name is name, as the
// held roster gives it.
func (g *edge) backend(name string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.names {
		if t.internal == name {
			return t.address, true
		}
	}
	return "", false
}

// outcome is what configuring e would be: Created when no edge runs,
// Changed when one runs otherwise, Unchanged when it runs as e says.
func (g *edge) outcome(e spec.EdgeSpec) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.serves == nil:
		return spec.Created
	case g.serves.spec != e:
		return spec.Changed
	}
	return spec.Unchanged
}

// name is the name of the edge running, "" when none is.
func (g *edge) name() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.serves == nil {
		return ""
	}
	return g.serves.spec.Name
}

// running says whether the edge named name runs.
func (g *edge) running(name string) bool { return g.name() == name }

// configure has the edge run as e says: the one running stops, and one
// made from e starts listening and obtains a certificate for every public
// name held.
func (g *edge) configure(ctx context.Context, e spec.EdgeSpec) error {
	g.stop()
	s, err := g.start(e)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.serves = s
	names := g.names
	g.mu.Unlock()
	s.manage(names)
	return nil
}

// stop closes the edge's listeners and stops renewing its certificates.
func (g *edge) stop() {
	if g == nil {
		return
	}
	g.mu.Lock()
	s := g.serves
	g.serves = nil
	g.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// edgeServe is one edge as a resource configured it: its listeners, its
// certmagic, the names it manages.
type edgeServe struct {
	spec   spec.EdgeSpec
	edge   *edge
	cache  *certmagic.Cache
	magic  *certmagic.Config
	issuer *certmagic.ACMEIssuer
	http   *http.Server
	https  *http.Server
	log    *slog.Logger
	// timeouts are the edge's, defaults filled in.
	timeouts edgeTimeouts

	mu sync.Mutex
	// managed are the names certmagic manages, each with the cancel of
	// its obtaining.
	managed map[string]context.CancelFunc
	done    chan struct{}
	// events are certmagic's failures per name, for the edge's report
	// (edgestatus.go).
	events edgeEvents
}

// start makes the edge e says and has it listen; nothing is obtained yet.
func (g *edge) start(e spec.EdgeSpec) (*edgeServe, error) {
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the edge's storage %s: %w", g.dir, err)
	}
	if err := os.Chmod(g.dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the edge's storage %s: %w", g.dir, err)
	}
	roots, err := acmeRoots(e.ACMERoots)
	if err != nil {
		return nil, err
	}
	httpHost, httpPort, err := splitListen(e.HTTP)
	if err != nil {
		return nil, err
	}
	_, httpsPort, err := splitListen(e.HTTPS)
	if err != nil {
		return nil, err
	}
	storage, err := g.storage(e)
	if err != nil {
		return nil, err
	}
	s := &edgeServe{spec: e, edge: g, timeouts: g.timeouts.orDefaults(), log: g.log.With("edge", e.Name), managed: map[string]context.CancelFunc{}, done: make(chan struct{})}
	s.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return s.magic, nil },
		RenewCheckInterval: g.renew.every,
		Logger:             certmagicLogger(s.log),
	})
	s.magic = certmagic.New(s.cache, certmagic.Config{
		Storage:            storage,
		RenewalWindowRatio: g.renew.window,
		Logger:             certmagicLogger(s.log),
		OnEvent:            s.onEvent,
	})
	s.issuer = certmagic.NewACMEIssuer(s.magic, certmagic.ACMEIssuer{
		CA: e.ACMECA, Email: e.Email, Agreed: true, TrustedRoots: roots,
		// The challenges are answered by the edge's own listeners: these
		// ports are theirs, so certmagic finds them taken and leaves
		// the answering to the handlers.
		ListenHost: httpHost, AltHTTPPort: httpPort, AltTLSALPNPort: httpsPort,
		Logger: certmagicLogger(s.log),
	})
	s.magic.Issuers = []certmagic.Issuer{s.issuer}
	if err := s.listen(); err != nil {
		s.cache.Stop()
		return nil, err
	}
	return s, nil
}

// acmeRoots are the roots in the PEM file at path; nil (the system's)
// when path is "".
func acmeRoots(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	pemBytes, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the edge's acme_roots: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("the edge's acme_roots %s holds no PEM certificate", path)
	}
	return pool, nil
}

// splitListen is a listen address's host and port.
func splitListen(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("edge listen address %q: %w", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("edge listen address %q: port %q: %w", addr, p, err)
	}
	return h, n, nil
}

// listen opens both listeners and serves on them until close.
func (s *edgeServe) listen() error {
	hl, err := net.Listen("tcp", s.spec.HTTP)
	if err != nil {
		return fmt.Errorf("edge %q: listen for http: %w", s.spec.Name, err)
	}
	tl, err := net.Listen("tcp", s.spec.HTTPS)
	if err != nil {
		hl.Close()
		return fmt.Errorf("edge %q: listen for https: %w", s.spec.Name, err)
	}
	tc := s.magic.TLSConfig()
	get := tc.GetCertificate
	tc.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if !s.serving(hello.ServerName) {
			return nil, fmt.Errorf("no certificate for %q: the roster serves no such public name", hello.ServerName)
		}
		return get(hello)
	}
	errs := slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	s.http = &http.Server{Handler: s.issuer.HTTPChallengeHandler(http.HandlerFunc(s.redirect)),
		ReadHeaderTimeout: s.timeouts.readHeader, IdleTimeout: s.timeouts.idle, ErrorLog: errs}
	s.https = &http.Server{Handler: s.proxy(), TLSConfig: tc,
		ReadHeaderTimeout: s.timeouts.readHeader, IdleTimeout: s.timeouts.idle, ErrorLog: errs}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := s.http.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("the edge's http listener stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := s.https.ServeTLS(tl, "", ""); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("the edge's https listener stopped", "err", err)
		}
	}()
	go func() { wg.Wait(); close(s.done) }()
	s.log.Info("edge listening", "http", hl.Addr().String(), "https", tl.Addr().String(), "acme_ca", s.spec.ACMECA)
	return nil
}

// serving says whether the held roster serves name.
func (s *edgeServe) serving(name string) bool {
	_, ok := s.edge.target(name)
	return ok
}

// manage has certmagic manage exactly names: each new one obtained (or
// loaded from storage) in the background, each gone no longer renewed.
func (s *edgeServe) manage(names map[string]edgeTarget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []certmagic.SubjectIssuer
	for name, cancel := range s.managed {
		if _, ok := names[name]; !ok {
			cancel()
			delete(s.managed, name)
			gone = append(gone, certmagic.SubjectIssuer{Subject: name})
		}
	}
	if len(gone) > 0 {
		s.cache.RemoveManaged(gone)
		s.log.Info("public names no longer served", "names", len(gone))
	}
	var added []string
	for name := range names {
		if _, ok := s.managed[name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		s.managed[name] = cancel
		if err := s.magic.ManageAsync(ctx, []string{name}); err != nil {
			s.log.Error("public name not managed", "name", name, "err", err)
		}
		added = append(added, name)
	}
	if len(added) > 0 {
		slices.Sort(added)
		s.log.Info("public names served", "names", added)
	}
}

// close stops the listeners, the obtaining and the renewals.
func (s *edgeServe) close() {
	s.mu.Lock()
	for _, cancel := range s.managed {
		cancel()
	}
	s.managed = map[string]context.CancelFunc{}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.http.Shutdown(ctx)
	s.https.Shutdown(ctx)
	s.http.Close()
	s.https.Close()
	<-s.done
	s.cache.Stop()
	s.log.Info("edge stopped")
}

// onEvent logs what certmagic did for the edge, and records it for the
// edge's report.
func (s *edgeServe) onEvent(_ context.Context, event string, data map[string]any) error {
	s.events.record(event, data, time.Now())
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cert_obtained":
		s.log.Info(map[bool]string{false: "certificate obtained", true: "certificate renewed"}[renewal], "name", name, "ca", s.spec.ACMECA)
	case "cert_failed":
		s.log.Warn("certificate not obtained; certmagic tries again", "name", name, "renewal", renewal, "err", data["error"])
	}
	return nil
}
