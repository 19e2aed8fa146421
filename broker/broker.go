// Package broker runs the embedded NATS server, the mesh's bus: the accounts
// given as configuration text at start, the users admitted by a callback
// that sees every client connect (so replacing them reloads nothing),
// JetStream on a file store that syncs every write, TLS with a certificate
// from the mesh's CA; with a cluster configured, routes to a static set of
// peers over TLS from the same CA (cluster.go).
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Account is the bus account every mesh user belongs to.
const Account = "MESH"

// Config is what the bus needs to start.
type Config struct {
	// Listen is host:port; port 0 takes a free port.
	Listen string
	// StoreDir is where JetStream keeps its files.
	StoreDir string
	// TLS is the server side of the bus's TLS. Clients hand-shake TLS first.
	TLS *tls.Config
	// Users are the bus's users at start; SetUsers replaces them later.
	Users []User
	// SyncInterval, when not zero, has JetStream sync its files at that
	// interval instead of at every write: faster, and an acknowledged
	// write may be lost with the machine. A cluster refuses it.
	SyncInterval time.Duration
	// Cluster, when set, makes the bus one server of a cluster.
	Cluster *Cluster
}

// User is one bus user, identified by its nkey. A user with Full set may do
// anything in the mesh account (the controller); any other may do only what
// Publish and Subscribe allow, and nothing if both are empty.
type User struct {
	NKey      string
	Full      bool
	Publish   []string
	Subscribe []string
	// System puts the user in the bus's system account, with every
	// right there: the cluster's own operations (a server's removal from
	// JetStream's meta group) are asked from it. Only a controller's
	// process holds one, in memory.
	System bool
}

// Server is the embedded bus.
type Server struct {
	cfg   Config
	log   *slog.Logger
	ready chan struct{}

	gate *gate

	// mu guards ns, and makes one change of the users at a time.
	mu sync.Mutex
	ns *server.Server
}

// New checks cfg and starts nothing.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("bus address %q: %w (want host:port, e.g. 0.0.0.0:4222)", cfg.Listen, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, fmt.Errorf("bus address %q: port %q is not a number from 0 to 65535", cfg.Listen, port)
	}
	if host == "" {
		return nil, fmt.Errorf("bus address %q: no host (use 0.0.0.0 for every address)", cfg.Listen)
	}
	if cfg.StoreDir == "" {
		return nil, errors.New("bus: no JetStream store directory")
	}
	if cfg.TLS == nil {
		return nil, errors.New("bus: no TLS configuration")
	}
	if cfg.SyncInterval < 0 {
		return nil, fmt.Errorf("bus: JetStream sync interval %s is negative", cfg.SyncInterval)
	}
	if cfg.Cluster != nil {
		if err := cfg.Cluster.check(); err != nil {
			return nil, err
		}
	}
	g := &gate{}
	if _, _, err := g.swap(cfg.Users); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, ready: make(chan struct{}), gate: g}
	// The options are composed here once to check them: a cluster whose
	// JetStream would not sync every write is refused before it starts.
	opts, err := s.options(host, 0)
	if err != nil {
		return nil, err
	}
	if cfg.Cluster != nil && !opts.SyncAlways {
		return nil, errors.New("bus: a cluster's JetStream must sync every write (sync_interval: always): lazy syncing loses acknowledged writes when machines fail together")
	}
	return s, nil
}

func (u User) check() error {
	if !strings.HasPrefix(u.NKey, "U") || len(u.NKey) != 56 {
		return fmt.Errorf("bus user %q: not a user nkey", u.NKey)
	}
	for _, s := range append(append([]string(nil), u.Publish...), u.Subscribe...) {
		if !server.IsValidSubject(s) {
			return fmt.Errorf("bus user %s: subject %q is not a valid subject", u.NKey, s)
		}
	}
	return nil
}

// Ready is closed once the bus accepts connections.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run starts the bus and blocks until ctx ends, then shuts it down.
func (s *Server) Run(ctx context.Context) error {
	host, portText, _ := net.SplitHostPort(s.cfg.Listen)
	port, _ := strconv.Atoi(portText)
	// nats-server reports an address it cannot bind through its logger
	// only; bind it once here so the error is ours to return.
	l, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("bind bus address %s: %w", s.cfg.Listen, err)
	}
	l.Close()
	if c := s.cfg.Cluster; c != nil {
		l, err := net.Listen("tcp", c.Listen)
		if err != nil {
			return fmt.Errorf("bind cluster address %s: %w", c.Listen, err)
		}
		l.Close()
	}
	// A port 0 is the server's to choose as it binds: one chosen here and
	// let go could be taken by another process before the server bound it,
	// which left the bus never ready (seen under a loaded test run).
	if port == 0 {
		port = server.RANDOM_PORT
	}

	opts, err := s.options(host, port)
	if err != nil {
		return err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("start bus: %w", err)
	}
	acc, err := ns.LookupAccount(Account)
	if err != nil {
		ns.Shutdown()
		return fmt.Errorf("start bus: the %s account: %w", Account, err)
	}
	sys, err := ns.LookupAccount(systemAccount)
	if err != nil {
		ns.Shutdown()
		return fmt.Errorf("start bus: the %s account: %w", systemAccount, err)
	}
	s.gate.start(ns, acc, sys)
	ns.SetLoggerV2(logger{s.log}, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return fmt.Errorf("start bus on %s: not ready for connections after 30s", s.cfg.Listen)
	}
	s.mu.Lock()
	s.ns = ns
	s.mu.Unlock()
	close(s.ready)
	s.log.Info("bus ready", "addr", s.Addr())

	<-ctx.Done()
	ns.Shutdown()
	ns.WaitForShutdown()
	return nil
}

// Addr is the address the bus bound, host:port. It is empty before Ready.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ns == nil {
		return ""
	}
	return s.ns.Addr().String()
}

// NATS is the running server, for in-process connections
// (nats.InProcessServer). It is nil before Ready.
func (s *Server) NATS() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns
}

// Users are the bus's users in force, by nkey.
func (s *Server) Users() []User {
	return s.gate.list()
}

// SetUsers replaces the bus's users. It reloads nothing: a client that
// connects from then on is admitted by the new users. It returns once every
// connection of a user withdrawn, or whose lists changed, is closed; such a
// user connects again with its new lists, or is refused. Before Run it only
// records them. It costs what every user costs: AddUser and WithdrawUser
// change one.
func (s *Server) SetUsers(users []User) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	drop, ns, err := s.gate.swap(slices.Clone(users))
	if err != nil {
		return err
	}
	disconnect(ns, drop)
	return nil
}

// AddUser puts u in force beside the users in force, as SetUsers with one
// user more (or one user's lists changed) does, at the cost of one user:
// it returns once the connections of the user of the same nkey whose lists
// changed are closed. A user it cannot admit is an error, and changes
// nothing.
func (s *Server) AddUser(u User) error {
	u.Publish, u.Subscribe = slices.Clone(u.Publish), slices.Clone(u.Subscribe)
	s.mu.Lock()
	defer s.mu.Unlock()
	drop, ns, err := s.gate.add(u)
	if err != nil {
		return err
	}
	disconnect(ns, drop)
	return nil
}

// WithdrawUser takes the user nkey out of force, as SetUsers without it
// does, at the cost of one user: it returns once that user's connections
// are closed. A user not in force is no error.
func (s *Server) WithdrawUser(nkey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	drop, ns := s.gate.withdraw(nkey)
	disconnect(ns, drop)
}

// AddStandingUser puts u in force beside the users SetUsers, AddUser and
// WithdrawUser change, which leave it in force: a user the bus's owner
// keeps apart from the store's (a controller token's enrolment user, a
// bus peer's own controller). A nkey both standing and a user is admitted
// as the user. It returns once the connections of the standing user of
// the same nkey whose lists changed are closed.
func (s *Server) AddStandingUser(u User) error {
	u.Publish, u.Subscribe = slices.Clone(u.Publish), slices.Clone(u.Subscribe)
	s.mu.Lock()
	defer s.mu.Unlock()
	drop, ns, err := s.gate.stand(u)
	if err != nil {
		return err
	}
	disconnect(ns, drop)
	return nil
}

// WithdrawStandingUser takes the standing user nkey out of force and
// returns once its connections are closed.
func (s *Server) WithdrawStandingUser(nkey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	drop, ns := s.gate.sitDown(nkey)
	disconnect(ns, drop)
}

// disconnect closes the connections ids of ns (none before it starts).
func disconnect(ns *server.Server, ids []uint64) {
	if ns == nil {
		return
	}
	for _, id := range ids {
		// An ID not found is a connection that closed since.
		_ = ns.DisconnectClientByID(id)
	}
}

// options composes the server's options: the accounts and JetStream as
// configuration text, the rest in Go, with the gate admitting every client.
// The nonce is always sent, so every client signs it with its user's seed.
func (s *Server) options(host string, port int) (*server.Options, error) {
	opts := &server.Options{}
	if err := opts.ProcessConfigString(configText(s.cfg.StoreDir, s.cfg.SyncInterval)); err != nil {
		return nil, fmt.Errorf("bus configuration: %w", err)
	}
	opts.Host = host
	opts.Port = port
	opts.NoSigs = true
	opts.NoLog = false
	opts.MaxPayload = 4 << 20
	opts.TLS = true
	opts.TLSConfig = s.cfg.TLS
	opts.TLSHandshakeFirst = true
	opts.TLSTimeout = 5
	opts.ServerName = "mesh-bus"
	opts.CustomClientAuthentication = s.gate
	opts.AlwaysEnableNonce = true
	if s.cfg.Cluster != nil {
		if err := s.cfg.Cluster.apply(opts); err != nil {
			return nil, err
		}
	}
	return opts, nil
}

// systemAccount is the bus's system account: only a System user is in it.
const systemAccount = "SYS"

// configText is the bus's accounts as nats-server reads them: JetStream
// with every write synced (or synced every syncInterval when it is not
// zero), a system account only a System user is in, and the mesh account with
// JetStream enabled. No user is in it: the gate admits them.
func configText(storeDir string, syncInterval time.Duration) string {
	sync := "always"
	if syncInterval > 0 {
		sync = strconv.Quote(syncInterval.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %s\n  sync_interval: %s\n}\n", strconv.Quote(storeDir), sync)
	fmt.Fprintf(&b, "system_account: %s\n", systemAccount)
	fmt.Fprintf(&b, "accounts {\n  %s {\n    users: []\n  }\n", systemAccount)
	fmt.Fprintf(&b, "  %s {\n    jetstream: enabled\n    users: []\n  }\n}\n", Account)
	return b.String()
}

// logger hands nats-server's lines to slog. Its notices are start-up and
// connection chatter, so they go to debug.
type logger struct{ log *slog.Logger }

func (l logger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l logger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l logger) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l logger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l logger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l logger) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
