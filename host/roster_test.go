package host_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// rosterDoc is roster message seq of mesh m: alpha, and route web on alpha
// at addr.
func rosterDoc(seq uint64, addr string) spec.RosterDoc {
	now := time.Now().UTC()
	return spec.RosterDoc{Mesh: "m", Seq: seq, Issued: now, Expires: now.Add(time.Hour), Protocol: spec.Protocol,
		Names: spec.Roster{Nodes: []spec.RosterNode{{Name: "alpha", Address: "10.1.0.1"}},
			Routes: []spec.RosterRoute{{Name: spec.RouteName("web", "alpha"), Node: "alpha", Address: addr, Port: 80, Module: "web"}}}}
}

// publishRoster sends raw with sig (nil: sign it) on the roster subject,
// and returns its stream sequence.
func (b *bench) publishRoster(raw, sig []byte) uint64 {
	b.t.Helper()
	if sig == nil {
		sig = ed25519.Sign(b.key, raw)
	}
	m := nats.NewMsg(spec.RosterSubject)
	m.Data = raw
	m.Header.Set(spec.SigHeader, base64.StdEncoding.EncodeToString(sig))
	ack, err := b.js.PublishMsg(context.Background(), m)
	if err != nil {
		b.t.Fatal(err)
	}
	return ack.Sequence
}

// answered waits until the host has handled the stream's message of
// sequence seq (or a later one).
func (b *bench) answered(seq uint64) {
	b.t.Helper()
	poll.Until(b.t, 20*time.Second, "the host handles the stream's message", func() error {
		a := b.agent.Load()
		if a == nil {
			return errors.New("no host started")
		}
		got := host.HandledSeq(a)
		if got >= seq {
			return nil
		}
		return fmt.Errorf("handled %d, want %d", got, seq)
	})
}

// webAnswers is what names answers for web.alpha.internal, over UDP.
func webAnswers(t *testing.T, names *resolver.Server) []string {
	t.Helper()
	r, err := askUDP(t, names.Addrs()[0], spec.RouteName("web", "alpha"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rr := range r.Answer {
		out = append(out, strings.Fields(rr.String())[4])
	}
	return out
}

func servesWeb(t *testing.T, names *resolver.Server, addr string) {
	t.Helper()
	poll.Until(t, 20*time.Second, "web.alpha.internal answers "+addr, func() error {
		got := webAnswers(t, names)
		if slices.Equal(got, []string{addr}) {
			return nil
		}
		return fmt.Errorf("it answers %v", got)
	})
}

// countedNames is a real resolver that counts the zones it is handed.
type countedNames struct {
	*resolver.Server
	zones *atomic.Int64
}

func (n countedNames) SetZone(z resolver.Zone) {
	n.zones.Add(1)
	n.Server.SetZone(z)
}

// TestNamesServedOncePerRoster: the resolver is handed the names once for
// each roster the host takes, not again for each declaration naming the
// roster it holds (building the zone costs the size of the fleet, and a
// push to every host would build one a host for nothing).
func TestNamesServedOncePerRoster(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	names := runResolver(t, resolver.Zone{})
	zones := new(atomic.Int64)
	b.names = countedNames{Server: names, zones: zones}
	b.start()
	r1 := encodeRoster(t, rosterDoc(1, "10.1.0.1"))
	b.answered(b.publishRoster(r1, nil))
	servesWeb(t, names, "10.1.0.1")
	after1 := zones.Load()

	for seq := uint64(1); seq <= 2; seq++ {
		d := b.declaration(seq, fileResource("/f", strconv.FormatUint(seq, 10)))
		d.RosterRef = &spec.RosterRef{Seq: 1, Digest: spec.ContentDigest(r1)}
		b.publish(encode(t, d), nil)
		if rep := b.report(); rep.Seq != seq || rep.Refused != "" || rep.Waiting != "" {
			t.Fatalf("declaration %d: report %+v", seq, rep)
		}
		if n := zones.Load(); n != after1 {
			t.Fatalf("declaration %d, naming the roster held: the resolver was handed %d zones more, want none", seq, n-after1)
		}
	}

	b.publishRoster(encodeRoster(t, rosterDoc(2, "10.1.0.2")), nil)
	servesWeb(t, names, "10.1.0.2")
	if n := zones.Load(); n != after1+1 {
		t.Fatalf("roster 2: the resolver was handed %d zones, want 1", n-after1)
	}
}

func keptRosterSeq(t *testing.T, b *bench) uint64 {
	t.Helper()
	st, _, err := host.ReadState(b.hostDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Roster) == 0 {
		return 0
	}
	var doc spec.RosterDoc
	if err := spec.Decode(st.Roster, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Seq
}

// TestEachRosterRefusal: a roster message is refused like a declaration,
// each sent for real on the bus: the host keeps and serves the roster it
// held, and says why in its log.
func TestEachRosterRefusal(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	names := runResolver(t, resolver.Zone{})
	b.names = names
	b.start()
	good := encodeRoster(t, rosterDoc(5, "10.1.0.5"))
	b.answered(b.publishRoster(good, nil))
	servesWeb(t, names, "10.1.0.5")
	if seq := keptRosterSeq(t, b); seq != 5 {
		t.Fatalf("kept roster %d, want 5", seq)
	}

	other := rosterDoc(6, "10.9.9.9")
	other.Mesh = "x"
	expired := rosterDoc(7, "10.9.9.9")
	expired.Issued, expired.Expires = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	future := rosterDoc(8, "10.9.9.9")
	future.Issued = time.Now().Add(time.Hour)
	unknown := strings.Replace(string(encodeRoster(t, rosterDoc(9, "10.9.9.9"))), `"mesh":"m"`, `"mesh":"m","colour":"blue"`, 1)
	unsigned := encodeRoster(t, rosterDoc(11, "10.9.9.9"))
	big := rosterDoc(12, "10.9.9.9")
	for i := range 30000 {
		big.Names.Nodes = append(big.Names.Nodes, spec.RosterNode{Name: strings.Repeat("n", 80) + string(rune('a'+i%26)), Address: "10.9.9.9"})
	}
	// A declaration's bytes, signed with the mesh's key, are no roster.
	decl := encode(t, b.declaration(13, fileResource("/x", "x")))
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	for _, c := range []struct {
		name string
		raw  []byte
		sig  []byte
		want string
	}{
		{"a lower sequence (replayed)", encodeRoster(t, rosterDoc(4, "10.9.9.9")), nil, "roster sequence 4 is lower than the kept 5"},
		{"the same sequence signed again with other bytes", encodeRoster(t, rosterDoc(5, "10.9.9.9")), nil, "roster sequence 5 is the kept one, with different bytes"},
		{"another mesh's", encodeRoster(t, other), nil, `for mesh "x", not "m"`},
		{"expired", encodeRoster(t, expired), nil, "the roster expired at"},
		{"issued in the future", encodeRoster(t, future), nil, "in the future"},
		{"an unknown field", []byte(unknown), nil, `unknown field "colour"`},
		{"signed by another key", unsigned, ed25519.Sign(otherKey, unsigned), "signature does not verify"},
		{"unsigned", unsigned, []byte{}, "the roster is unsigned"},
		{"over the cap", encodeRoster(t, big), nil, "over the 3145728-byte cap"},
		{"a declaration", decl, nil, `unknown field "node"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sig := c.sig
			if sig != nil && len(sig) == 0 {
				m := nats.NewMsg(spec.RosterSubject)
				m.Data = c.raw
				ack, err := b.js.PublishMsg(context.Background(), m)
				if err != nil {
					t.Fatal(err)
				}
				b.answered(ack.Sequence)
			} else {
				b.answered(b.publishRoster(c.raw, sig))
			}
			if !strings.Contains(strings.ReplaceAll(b.logs.String(), `\"`, `"`), c.want) {
				t.Fatalf("the host's log does not say %q:\n%s", c.want, b.logs.String())
			}
			if got := webAnswers(t, names); !slices.Equal(got, []string{"10.1.0.5"}) {
				t.Fatalf("a refused roster is served: %v", got)
			}
			if seq := keptRosterSeq(t, b); seq != 5 {
				t.Fatalf("kept roster %d after a refusal, want 5", seq)
			}
		})
	}
	// The kept one again is a duplicate: acked, nothing written.
	refusals := strings.Count(b.logs.String(), "roster refused")
	b.answered(b.publishRoster(good, nil))
	if strings.Count(b.logs.String(), "roster refused") != refusals {
		t.Fatalf("the kept roster delivered again was refused:\n%s", b.logs.String())
	}
	// A roster sent while nobody was watching is taken, and a roster
	// message changes no declaration: none was ever kept.
	b.answered(b.publishRoster(encodeRoster(t, rosterDoc(14, "10.1.0.14")), nil))
	servesWeb(t, names, "10.1.0.14")
	if st, _, _ := host.ReadState(b.hostDir); st.Seq != 0 || len(st.Declaration) != 0 {
		t.Fatalf("a roster message kept declaration %d", st.Seq)
	}
}

func encodeRoster(t testing.TB, d spec.RosterDoc) []byte {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestDeclarationWaitsForItsRoster: a declaration naming a roster the host
// has not got is not applied against the older names: the host asks the
// controller for the roster, reports that it waits (once: delivered again,
// it asks again and says nothing new), and applies the declaration as soon
// as the roster arrives on the stream. One naming a
// roster the controller answers with is applied at once. One naming the
// held sequence with other bytes is refused.
func TestDeclarationWaitsForItsRoster(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	names := runResolver(t, resolver.Zone{})
	b.names = names
	// The controller's part: roster requests on alpha's subject, answered
	// with the roster in force, under alpha's inbox.
	inForce := make(chan []byte, 1)
	asked := make(chan spec.RosterRequest, 16)
	b.answerRosters(func(req spec.RosterRequest) []byte {
		asked <- req
		select {
		case raw := <-inForce:
			return raw
		default:
			return nil
		}
	})
	b.start()
	r1 := encodeRoster(t, rosterDoc(1, "10.1.0.1"))
	b.answered(b.publishRoster(r1, nil))
	servesWeb(t, names, "10.1.0.1")

	// Declaration 1 names roster 2, which is neither held nor answered.
	r2 := encodeRoster(t, rosterDoc(2, "10.1.0.2"))
	d1 := b.declaration(1, fileResource("/one", "1"))
	d1.RosterRef = &spec.RosterRef{Seq: 2, Digest: spec.ContentDigest(r2)}
	b.publish(encode(t, d1), nil)
	rep := b.report()
	if rep.Seq != 1 || rep.Refused != "" || !strings.Contains(rep.Waiting, "names roster 2") {
		t.Fatalf("report %+v, want declaration 1 waiting for roster 2", rep)
	}
	if req := <-asked; req.Want != 2 {
		t.Fatalf("the host asked for roster %d, want 2", req.Want)
	}
	if b.exists("/one") {
		t.Fatal("a declaration was applied against a roster older than the one it names")
	}
	if st, _, _ := host.ReadState(b.hostDir); st.Seq != 0 {
		t.Fatalf("a declaration waiting for its roster was kept: %d", st.Seq)
	}
	// Delivered again, it asks again and says nothing new: no second
	// report, one line in the log.
	select {
	case req := <-asked:
		if req.Want != 2 {
			t.Fatalf("the host asked again for roster %d, want 2", req.Want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting declaration was not delivered again")
	}
	select {
	case r := <-b.reports:
		t.Fatalf("a declaration waiting again was reported again: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	if n := strings.Count(b.logs.String(), "declaration waits for the roster it names"); n != 1 {
		t.Fatalf("the wait was logged %d times, want once", n)
	}
	// Roster 2 arrives: the declaration is applied, the names are 2's.
	b.publishRoster(r2, nil)
	rep = b.report()
	if rep.Seq != 1 || rep.Refused != "" || rep.Waiting != "" || !b.exists("/one") {
		t.Fatalf("after roster 2: report %+v, /one exists %v", rep, b.exists("/one"))
	}
	servesWeb(t, names, "10.1.0.2")

	// Declaration 2 names roster 3, which the controller answers with.
	r3 := encodeRoster(t, rosterDoc(3, "10.1.0.3"))
	inForce <- r3
	d2 := b.declaration(2, fileResource("/two", "2"))
	d2.RosterRef = &spec.RosterRef{Seq: 3, Digest: spec.ContentDigest(r3)}
	b.publish(encode(t, d2), nil)
	if rep = b.report(); rep.Seq != 2 || rep.Refused != "" || rep.Waiting != "" || !b.exists("/two") {
		t.Fatalf("a declaration whose roster the controller answers with: report %+v", rep)
	}
	servesWeb(t, names, "10.1.0.3")
	if seq := keptRosterSeq(t, b); seq != 3 {
		t.Fatalf("kept roster %d, want 3 (the controller's answer)", seq)
	}

	// Declaration 3 names roster 3 with other bytes: refused.
	d3 := b.declaration(3, fileResource("/three", "3"))
	d3.RosterRef = &spec.RosterRef{Seq: 3, Digest: spec.ContentDigest([]byte("other"))}
	b.publish(encode(t, d3), nil)
	if rep = b.report(); rep.Seq != 3 || !strings.Contains(rep.Refused, "names roster 3 as") || b.exists("/three") {
		t.Fatalf("a declaration naming the held roster with other bytes: report %+v", rep)
	}
	// Declaration 4 names roster 2, older than the one held: applied.
	d4 := b.declaration(4, fileResource("/four", "4"))
	d4.RosterRef = &spec.RosterRef{Seq: 2, Digest: spec.ContentDigest(r2)}
	b.publish(encode(t, d4), nil)
	if rep = b.report(); rep.Seq != 4 || rep.Refused != "" || !b.exists("/four") {
		t.Fatalf("a declaration naming an older roster than the one held: report %+v", rep)
	}
	servesWeb(t, names, "10.1.0.3")
}

// TestRosterKeptAcrossRestart: the roster held is in RosterFile; a host
// started again serves its names at once, before any message arrives,
// into a resolver that knows nothing, and its heartbeats name it.
func TestRosterKeptAcrossRestart(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	names := runResolver(t, resolver.Zone{})
	b.names = names
	b.start()
	b.answered(b.publishRoster(encodeRoster(t, rosterDoc(7, "10.1.0.7")), nil))
	servesWeb(t, names, "10.1.0.7")
	b.stop()

	fresh := runResolver(t, resolver.Zone{Names: map[string][]netip.Addr{}})
	b.names = fresh
	if got := webAnswers(t, fresh); len(got) != 0 {
		t.Fatalf("a fresh resolver answers %v", got)
	}
	beats := make(chan *nats.Msg, 16)
	sub, err := b.nc.ChanSubscribe(spec.NodeSubject("alpha", spec.KindHeartbeat), beats)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	b.nc.Flush()
	b.start()
	servesWeb(t, fresh, "10.1.0.7")
	if seq := keptRosterSeq(t, b); seq != 7 {
		t.Fatalf("kept roster %d after a restart, want 7", seq)
	}
	// Its heartbeats say which roster it holds.
	select {
	case m := <-beats:
		var hb spec.Heartbeat
		if err := spec.Decode(m.Data, &hb); err != nil || hb.RosterSeq != 7 {
			t.Fatalf("heartbeat %s (%v), want roster_seq 7", m.Data, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no heartbeat from the host")
	}
}
