package host_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// joinBus is a bus a token can join through, and a controller's
// connection to it that answers enrolments as the test says.
type joinBus struct {
	token spec.Token
	ctl   *nats.Conn
}

func newJoinBus(t *testing.T) *joinBus {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "m", time.Now(), "internal", spec.BusTLSName)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := auth.IssueServer([]string{spec.BusTLSName}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	ctl, _ := nkeys.CreateUser()
	ctlPub, _ := ctl.PublicKey()
	enrol, _ := nkeys.CreateUser()
	enrolPub, _ := enrol.PublicKey()
	enrolSeed, _ := enrol.Seed()
	p := spec.EnrolPermissions("t1")
	srv, err := broker.New(broker.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(),
		TLS:   &tls.Config{Certificates: []tls.Certificate{cert}},
		Users: []broker.User{{NKey: ctlPub, Full: true}, {NKey: enrolPub, Publish: p.Publish, Subscribe: p.Subscribe}}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-srv.Ready()
	url := "nats://" + srv.Addr()
	nc, err := nats.Connect(url, nats.Nkey(ctlPub, ctl.Sign), nats.Secure(ca.ClientTLS(auth.Root(), spec.BusTLSName)),
		nats.TLSHandshakeFirst(), nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &joinBus{ctl: nc, token: spec.Token{Mesh: "m", ID: "t1", Node: "beta", Pin: auth.Pin(), Bus: []string{url},
		Secret: string(enrolSeed), Expires: time.Now().Add(time.Hour)}}
}

// TestJoinWaitsForAController: a join sent while no controller answers
// on the bus (one restarting as its cluster grows) is sent again until
// one does, saying why it waits, and joins; an answer that refuses it
// is the join's error at once, never sent again.
func TestJoinWaitsForAController(t *testing.T) {
	t.Parallel()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		name    string
		refuse  bool
		wantErr string
	}{
		{"answered once a controller is there", false, ""},
		{"refused", true, "token t1 was revoked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newJoinBus(t)
			var mu sync.Mutex
			var waited []error
			asked := 0
			cfg := host.JoinConfig{Dir: t.TempDir() + "/host", Token: b.token, Address: "127.0.0.3", Now: time.Now(),
				Waiting: func(why error) {
					mu.Lock()
					defer mu.Unlock()
					waited = append(waited, why)
					if len(waited) != 1 {
						return
					}
					// The controller comes once the join has waited.
					if _, err := b.ctl.Subscribe(spec.EnrolSubject, func(m *nats.Msg) {
						mu.Lock()
						asked++
						mu.Unlock()
						if tc.refuse {
							m.Respond(spec.EncodeReply(nil, errors.New("token t1 was revoked")))
							return
						}
						m.Respond(spec.EncodeReply(spec.EnrolResult{Mesh: "m", Node: "beta", Bus: b.token.Bus,
							SignKey: base64.StdEncoding.EncodeToString(pub)}, nil))
					}); err != nil {
						t.Error(err)
					}
					b.ctl.Flush()
				}}
			err := host.Join(context.Background(), cfg)
			mu.Lock()
			defer mu.Unlock()
			if len(waited) != 1 || !strings.Contains(waited[0].Error(), "no controller answers") {
				t.Fatalf("the join waited %d times (%v), want once for no controller answering", len(waited), waited)
			}
			if asked != 1 {
				t.Fatalf("the controller was asked %d times, want 1", asked)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("join: %v", err)
				}
				if st, _, err := host.ReadState(cfg.Dir); err != nil || st.Node != "beta" {
					t.Fatalf("the joined host's state: %+v, %v", st, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("join: %v, want %q", err, tc.wantErr)
			}
			if err := host.CheckUnjoined(cfg.Dir); err != nil {
				t.Fatalf("a refused join left state behind: %v", err)
			}
		})
	}
}
