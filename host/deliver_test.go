package host_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// bench is a real bus with a node's host on it, where the test plays the
// controller: it creates the stream, which republishes every message
// under spec.Republished, signs declarations with its own key, publishes
// them for real and answers the host's declaration requests from the
// stream, as the controller does.
type bench struct {
	t       testing.TB
	nc      *nats.Conn
	js      jetstream.JetStream
	key     ed25519.PrivateKey
	root    string // the host's --root
	hostDir string
	reports chan spec.Report
	start   func() // starts the host
	stop    func() // stops it, as a SIGTERM does, and waits for it
	// heartbeat is the host's heartbeat interval, and reconcile how often
	// it reconciles: an hour each unless a test sets them before start.
	heartbeat, reconcile time.Duration
	// reportRetry is the host's Config.ReportRetry; ack, when set, says
	// which reports the bench answers (all, when unset).
	reportRetry time.Duration
	ack         atomic.Pointer[func(spec.Report) bool]
	// asked, when set before start, is sent each declaration request
	// once it is answered.
	asked chan<- spec.DeclarationRequest
	// caught hears each declaration request answered: start waits for
	// the host's first, so what a test publishes next is not read into
	// the answer.
	caught chan struct{}
	// agent is the host last started.
	agent atomic.Pointer[host.Agent]
	// resends, when set, has every report reach reports, one the bench
	// answered already and the host sent again too; else such a one is
	// answered again and dropped, as a controller records it once (the
	// host sends a report again when it catches up before the answer
	// came, which a loaded machine makes happen).
	resends atomic.Bool
	// prepare, when set, is given each agent started, before it runs.
	prepare func(*host.Agent)
	// auth is the mesh's authority: its root is the one the host pinned.
	auth *ca.Authority
	// names, when set before start, is the host's resolver.
	names host.Names
	// logs holds what the host logged, as text.
	logs *syncBuffer
	// launched is the host's Config.Launched, and ended what each Run
	// returned.
	launched bool
	ended    chan error
	// panics, when set before start, counts the agent's recovered panics.
	panics *atomic.Uint64
	// bus is the bus, and nodeUser the host's user on it.
	bus      *broker.Server
	nodeUser broker.User
}

// syncBuffer is a buffer the host's logger writes to while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func newBench(t testing.TB) *bench {
	t.Helper()
	return newBenchPresenting(t, false)
}

// newBenchPresenting is newBench whose bus presents its leaf alone, without
// the intermediate that signed it, when leafOnly.
func newBenchPresenting(t testing.TB, leafOnly bool) *bench {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "m", time.Now(), "internal", spec.BusTLSName)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := auth.IssueServer([]string{spec.BusTLSName}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if leafOnly {
		cert.Certificate = cert.Certificate[:1]
	}
	ctl, _ := nkeys.CreateUser()
	ctlPub, _ := ctl.PublicKey()
	node, _ := nkeys.CreateUser()
	nodePub, _ := node.PublicKey()
	nodeSeed, _ := node.Seed()
	p := spec.NodePermissions("alpha")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	logs := &syncBuffer{}
	hostLog := slog.New(slog.NewTextHandler(logs, nil))
	bus, err := broker.New(broker.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(),
		TLS:   &tls.Config{Certificates: []tls.Certificate{cert}},
		Users: []broker.User{{NKey: ctlPub, Full: true}, {NKey: nodePub, Publish: p.Publish, Subscribe: p.Subscribe}}}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	busDone := make(chan struct{})
	go func() { bus.Run(ctx); close(busDone) }()
	<-bus.Ready()

	nc, err := nats.Connect("nats://"+bus.Addr(), nats.Nkey(ctlPub, ctl.Sign),
		nats.Secure(ca.HeldTLS(auth.Root(), spec.BusTLSName, func() []*x509.Certificate { return []*x509.Certificate{auth.Intermediate()} })), nats.TLSHandshakeFirst(),
		nats.Timeout(10*time.Second)) // not nats.go's 2 s: a loaded machine
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: spec.DeclarationStream, Subjects: []string{spec.DeclarationSubject("*"), spec.RosterSubject},
		MaxMsgSize: 4 << 20, AllowDirect: true, RePublish: &jetstream.RePublish{Source: ">", Destination: spec.Republished(">")}})
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{t: t, nc: nc, js: js, root: t.TempDir(), hostDir: filepath.Join(t.TempDir(), "host"), reports: make(chan spec.Report, 64), heartbeat: time.Hour, reconcile: time.Hour, auth: auth, ended: make(chan error, 8), logs: logs,
		bus: bus, nodeUser: broker.User{NKey: nodePub, Publish: p.Publish, Subscribe: p.Subscribe}, caught: make(chan struct{}, 1)}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	b.key = priv
	// The reports, answered as a controller does unless b.ack says
	// otherwise.
	answered := map[string]bool{} // the reports answered, by sequence and time
	if _, err := nc.Subscribe(spec.NodeSubject("alpha", spec.KindReport), func(m *nats.Msg) {
		var r spec.Report
		if err := json.Unmarshal(m.Data, &r); err == nil {
			key := fmt.Sprint(r.Seq, r.Time)
			if answered[key] && !b.resends.Load() {
				m.Respond(spec.EncodeReply(spec.ReportAck{Seq: r.Seq, Time: r.Time}, nil))
				return
			}
			b.reports <- r
			if ack := b.ack.Load(); m.Reply != "" && (ack == nil || (*ack)(r)) {
				answered[key] = true
				m.Respond(spec.EncodeReply(spec.ReportAck{Seq: r.Seq, Time: r.Time}, nil))
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(spec.NodeSubject("alpha", spec.KindDeclaration), func(m *nats.Msg) {
		var req spec.DeclarationRequest
		if err := spec.Decode(m.Data, &req); err != nil {
			t.Errorf("declaration request: %v", err)
		}
		// Told once answered: a test that publishes after it hears the
		// ask must not have its publish read into this answer.
		defer func() {
			if b.asked != nil {
				b.asked <- req
			}
			select {
			case b.caught <- struct{}{}:
			default:
			}
		}()
		last, err := stream.GetLastMsgForSubject(context.Background(), spec.DeclarationSubject("alpha"))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			m.Respond(spec.EncodeReply(nil, &spec.ReplyError{Kind: spec.ReplyNotFound, Message: "nothing sent yet"}))
		case err != nil:
			m.Respond(spec.EncodeReply(nil, err))
		case req.Have == spec.ContentDigest(last.Data):
			m.Respond(spec.EncodeReply(spec.DeclarationReply{Held: true}, nil))
		default:
			sig, _ := base64.StdEncoding.DecodeString(last.Header.Get(spec.SigHeader))
			m.Respond(spec.EncodeReply(spec.DeclarationReply{Body: last.Data, Sig: sig}, nil))
		}
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	if err := host.Init(b.hostDir, host.State{Mesh: "m", Node: "alpha", Bus: []string{"nats://" + bus.Addr()},
		CAPin: auth.Pin(), CARoot: string(auth.RootsPEM()), SignKey: base64.StdEncoding.EncodeToString(pub)}, nodeSeed); err != nil {
		t.Fatal(err)
	}
	var agentDone chan struct{}
	agentCancel := func() {}
	b.start = func() {
		agent, err := host.New(host.Config{Dir: b.hostDir, Root: b.root, HeartbeatEvery: b.heartbeat, ReconcileEvery: b.reconcile, Names: b.names, Launched: b.launched, Panics: b.panics,
			ReportRetry: b.reportRetry}, hostLog)
		if err != nil {
			t.Fatal(err)
		}
		if b.prepare != nil {
			b.prepare(agent)
		}
		b.agent.Store(agent)
		select {
		case <-b.caught:
		default:
		}
		actx, acancel := context.WithCancel(ctx)
		agentDone, agentCancel = make(chan struct{}), acancel
		go func() {
			err := agent.Run(actx)
			select {
			case b.ended <- err:
			default:
			}
			close(agentDone)
		}()
		select {
		case <-agent.Ready():
		case <-time.After(30 * time.Second):
			t.Fatal("the host was not ready within 30s: its first heartbeat did not reach the bus")
		}
		select {
		case <-b.caught:
		case <-time.After(20 * time.Second):
		}
	}
	b.stop = func() {
		agentCancel()
		<-agentDone
		agentDone = nil
	}
	t.Cleanup(func() {
		cancel()
		if agentDone != nil {
			<-agentDone
		}
		nc.Close()
		<-busDone
	})
	return b
}

func fileResource(path, content string) spec.Resource {
	return spec.Resource{Name: spec.ResourceName("t", spec.KindFile, path), Kind: spec.KindFile, Module: "t",
		Spec: &spec.FileSpec{Path: path, Mode: 0o644, Content: []byte(content), Size: int64(len(content)), Digest: spec.ContentDigest([]byte(content))}}
}

func (b *bench) declaration(seq uint64, resources ...spec.Resource) spec.Declaration {
	now := time.Now().UTC()
	return spec.Declaration{Mesh: "m", Node: "alpha", Seq: seq, Issued: now, Expires: now.Add(time.Hour), Protocol: spec.Protocol, Resources: resources}
}

// publish sends raw bytes with sig (nil: sign them) on alpha's stream subject.
func (b *bench) publish(raw, sig []byte) {
	b.t.Helper()
	if sig == nil {
		sig = ed25519.Sign(b.key, raw)
	}
	m := nats.NewMsg(spec.DeclarationSubject("alpha"))
	m.Data = raw
	m.Header.Set(spec.SigHeader, base64.StdEncoding.EncodeToString(sig))
	if _, err := b.js.PublishMsg(context.Background(), m); err != nil {
		b.t.Fatal(err)
	}
}

func encode(t testing.TB, d spec.Declaration) []byte {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (b *bench) report() spec.Report {
	b.t.Helper()
	select {
	case r := <-b.reports:
		return r
	case <-time.After(20 * time.Second):
		b.t.Fatal("no report from the host within 20s")
	}
	return spec.Report{}
}

func (b *bench) exists(path string) bool {
	_, err := os.Stat(filepath.Join(b.root, path))
	return err == nil
}

// TestEachRefusal holds invariant 4: each bad delivery, sent for real on
// the bus, is refused with its reason and nothing of it is applied.
func TestEachRefusal(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start()
	good := b.declaration(5, fileResource("/good", "v5"))
	goodRaw := encode(t, good)
	b.publish(goodRaw, nil)
	if r := b.report(); r.Refused != "" || r.Seq != 5 || !b.exists("/good") {
		t.Fatalf("a good declaration: %+v", r)
	}

	other := b.declaration(6, fileResource("/x", "x"))
	other.Node = "beta"
	lower := b.declaration(4, fileResource("/x", "x"))
	expired := b.declaration(7, fileResource("/x", "x"))
	expired.Issued, expired.Expires = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	sameSeq := b.declaration(5, fileResource("/x", "x"))
	future := b.declaration(8, fileResource("/x", "x"))
	future.Issued = time.Now().Add(time.Hour)
	unknown := strings.Replace(string(encode(t, b.declaration(9, fileResource("/x", "x")))), `"mesh":"m"`, `"mesh":"m","colour":"blue"`, 1)
	huge := b.declaration(10, fileResource("/x", strings.Repeat("a", spec.MaxDeclaration)))
	unsigned := encode(t, b.declaration(11, fileResource("/x", "x")))
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)

	cases := []struct {
		name string
		raw  []byte
		sig  []byte
		want string
	}{
		{"another node's", encode(t, other), nil, `for node "beta", not "alpha"`},
		{"a lower sequence", encode(t, lower), nil, "sequence 4 is lower than the kept 5"},
		{"the same sequence with other bytes", encode(t, sameSeq), nil, "sequence 5 is the kept one, with different bytes"},
		{"expired", encode(t, expired), nil, "expired at"},
		{"issued in the future", encode(t, future), nil, "in the future"},
		{"an unknown field", []byte(unknown), nil, `unknown field "colour"`},
		{"over the cap", encode(t, huge), nil, "over the 1048576-byte cap"},
		{"signed by another key", unsigned, ed25519.Sign(otherKey, unsigned), "signature does not verify"},
		{"signature of other bytes", unsigned, ed25519.Sign(b.key, goodRaw), "signature does not verify"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b.publish(c.raw, c.sig)
			r := b.report()
			if !strings.Contains(r.Refused, c.want) {
				t.Fatalf("refused %q, want %q", r.Refused, c.want)
			}
			if b.exists("/x") {
				t.Fatal("a refused declaration was applied")
			}
		})
	}
	// The same declaration again is a duplicate: acked, not applied, no report.
	os.Remove(filepath.Join(b.root, "good"))
	b.publish(goodRaw, nil)
	select {
	case r := <-b.reports:
		t.Fatalf("a duplicate was reported: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	if b.exists("/good") {
		t.Fatal("a duplicate was applied again")
	}
	st, _, _ := host.ReadState(b.hostDir)
	if st.Seq != 5 || st.AppliedSeq != 5 {
		t.Fatalf("kept %d applied %d after refusals, want 5 and 5", st.Seq, st.AppliedSeq)
	}
}

// TestKeptBeforeApplied: the kept sequence is in state.json before the
// apply; a host restarted from that state refuses anything lower.
func TestKeptSequenceSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start()
	b.publish(encode(t, b.declaration(3, fileResource("/f", "three"))), nil)
	b.report()
	st, _, err := host.ReadState(b.hostDir)
	if err != nil || st.Seq != 3 || len(st.Declaration) == 0 || len(st.Signature) == 0 {
		t.Fatalf("state after apply: seq %d, %d bytes kept, err %v", st.Seq, len(st.Declaration), err)
	}
}

// TestStopMidApplyReportsNoFailure: a host stopped while an apply waits (on
// a blob nobody serves) reports nothing: its resources did not fail, the
// host stopped; its next start applies the declaration again and reports.
// A stop taken for a failure would leave "context canceled" failures in
// mesh status.
func TestStopMidApplyReportsNoFailure(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	blob := []byte("a blob served only after the restart")
	asked := make(chan struct{}, 1)
	var serve atomic.Bool
	if _, err := b.nc.Subscribe(spec.NodeSubject("alpha", spec.KindBlob), func(m *nats.Msg) {
		if serve.Load() {
			res, _ := json.Marshal(spec.BlobChunkReply{Size: int64(len(blob)), Data: blob})
			body, _ := json.Marshal(spec.Reply{Result: res})
			m.Respond(body)
			return
		}
		select {
		case asked <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	b.nc.Flush()
	b.start()
	r := spec.Resource{Name: spec.ResourceName("t", spec.KindFile, "/big"), Kind: spec.KindFile, Module: "t",
		Spec: &spec.FileSpec{Path: "/big", Mode: 0o644, Blob: true, Size: int64(len(blob)), Digest: spec.ContentDigest(blob)}}
	b.publish(encode(t, b.declaration(1, fileResource("/small", "s"), r)), nil)
	select {
	case <-asked:
	case <-time.After(20 * time.Second):
		t.Fatal("the host did not ask for the blob")
	}
	b.stop()
	b.nc.Flush()
	select {
	case rep := <-b.reports:
		t.Fatalf("a host stopped mid-apply reported: %+v", rep)
	default:
	}
	// Started again: the declaration is applied again and reported.
	serve.Store(true)
	b.start()
	if rep := b.report(); rep.Seq != 1 || !rep.Reconcile || len(rep.Results) != 2 || rep.Results[0].Outcome != spec.Created || rep.Results[1].Outcome != spec.Created {
		t.Fatalf("the start after the stop reported %+v, want a reconcile of seq 1 creating both", rep)
	}
}

// TestFirstReconcileOfARunReports: a host started again reports its first
// reconcile even when it changes nothing, so what the controller last heard
// (perhaps a failure from before the restart) does not stand.
func TestFirstReconcileOfARunReports(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start()
	b.publish(encode(t, b.declaration(1, fileResource("/f", "one"))), nil)
	if rep := b.report(); rep.Seq != 1 || rep.Reconcile {
		t.Fatalf("first report %+v", rep)
	}
	b.stop()
	b.start()
	rep := b.report()
	if rep.Seq != 1 || !rep.Reconcile || rep.Writes != 0 || len(rep.Results) != 1 || rep.Results[0].Outcome != spec.Unchanged {
		t.Fatalf("the first reconcile after a start reported %+v, want seq 1 unchanged, no writes", rep)
	}
}
