package host_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// deltaTo is the delta that makes roster to of roster base (held as
// baseRaw), signed as the controller signs both.
func (b *bench) deltaTo(base spec.RosterDoc, baseRaw []byte, to spec.RosterDoc) spec.RosterDelta {
	b.t.Helper()
	to.Names.Normalize()
	d := spec.RosterDelta{Mesh: to.Mesh, Seq: to.Seq, Base: base.Seq, BaseDigest: spec.ContentDigest(baseRaw),
		Issued: to.Issued, Expires: to.Expires, Protocol: to.Protocol, FullSig: ed25519.Sign(b.key, encodeRoster(b.t, to))}
	d.SetNodes, d.DropNodes, d.SetRoutes, d.DropRoutes = spec.Changes(base.Names, to.Names)
	return d
}

// publishDelta sends d on the roster subject, marked a delta and signed
// with key (nil: the mesh's), and returns its stream sequence.
func (b *bench) publishDelta(d spec.RosterDelta, key ed25519.PrivateKey) uint64 {
	b.t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.publishDeltaRaw(raw, key)
}

func (b *bench) publishDeltaRaw(raw []byte, key ed25519.PrivateKey) uint64 {
	b.t.Helper()
	if key == nil {
		key = b.key
	}
	m := nats.NewMsg(spec.RosterSubject)
	m.Data = raw
	m.Header.Set(spec.SigHeader, base64.StdEncoding.EncodeToString(ed25519.Sign(key, raw)))
	m.Header.Set(spec.RosterDeltaHeader, "1")
	ack, err := b.js.PublishMsg(context.Background(), m)
	if err != nil {
		b.t.Fatal(err)
	}
	return ack.Sequence
}

// answerRosters answers alpha's roster requests, under its inbox, as the
// controller would: with the roster answer returns for each, signed with
// the mesh's key, or none sent yet when it returns nil. The check a host
// makes each time it connects (Want 0) is answered none sent yet, and not
// given to answer, unless checks is set.
func (b *bench) answerRosters(answer func(spec.RosterRequest) []byte) {
	b.t.Helper()
	b.answerRosterRequests(false, answer)
}

func (b *bench) answerRosterRequests(checks bool, answer func(spec.RosterRequest) []byte) {
	b.t.Helper()
	sub, err := b.nc.Subscribe(spec.NodeSubject("alpha", spec.KindRoster), func(m *nats.Msg) {
		var req spec.RosterRequest
		if err := spec.Decode(m.Data, &req); err != nil {
			b.t.Errorf("roster request: %v", err)
		}
		if req.Want == 0 && !checks {
			m.Respond(spec.EncodeReply(nil, &spec.ReplyError{Kind: spec.ReplyNotFound, Message: "no roster yet"}))
			return
		}
		raw := answer(req)
		if raw == nil {
			m.Respond(spec.EncodeReply(nil, &spec.ReplyError{Kind: spec.ReplyNotFound, Message: "no roster yet"}))
			return
		}
		m.Respond(spec.EncodeReply(spec.RosterReply{Body: raw, Sig: ed25519.Sign(b.key, raw)}, nil))
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { sub.Unsubscribe() })
	if err := b.nc.Flush(); err != nil {
		b.t.Fatal(err)
	}
}

// TestDeltaOnItsBaseIsTaken: a roster delta on the roster held makes the
// roster it announces, kept byte for byte as the controller signed it and
// served; each delta that must not be taken is refused (or, at or below
// the roster held, taken for a duplicate) and changes nothing; the
// controller's delta whose changes do not make what it signed keeps
// nothing of itself and has the host ask for the roster in force.
func TestDeltaOnItsBaseIsTaken(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	names := runResolver(t, resolver.Zone{})
	b.names = names
	b.start()
	r5 := rosterDoc(5, "10.1.0.5")
	raw5 := encodeRoster(t, r5)
	b.answered(b.publishRoster(raw5, nil))
	servesWeb(t, names, "10.1.0.5")

	r6 := rosterDoc(6, "10.1.0.6")
	r6.Names.Nodes = append(r6.Names.Nodes, spec.RosterNode{Name: "beta", Address: "10.1.0.2"})
	b.answered(b.publishDelta(b.deltaTo(r5, raw5, r6), nil))
	servesWeb(t, names, "10.1.0.6")
	st, _, err := host.ReadState(b.hostDir)
	if err != nil {
		t.Fatal(err)
	}
	raw6 := encodeRoster(t, r6)
	if !bytes.Equal(st.Roster, raw6) || !ed25519.Verify(b.key.Public().(ed25519.PublicKey), st.Roster, st.RosterSig) {
		t.Fatalf("the host keeps\n%s\nwant the roster the delta announces, as signed:\n%s", st.Roster, raw6)
	}

	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	r7 := rosterDoc(7, "10.9.9.9")
	other := b.deltaTo(r5, raw5, r7)
	other.Base, other.BaseDigest, other.Mesh = 6, spec.ContentDigest(raw6), "x"
	good7, _ := json.Marshal(b.deltaTo(r5, raw5, r7))
	unknown := strings.Replace(string(good7), `"mesh":"m"`, `"mesh":"m","colour":"blue"`, 1)
	for _, c := range []struct {
		name string
		send func() uint64
		want string
	}{
		{"another mesh's", func() uint64 { return b.publishDelta(other, nil) }, `delta is for mesh "x", not "m"`},
		{"signed by another key", func() uint64 { return b.publishDelta(b.deltaTo(r5, raw5, r7), otherKey) }, "delta's signature does not verify"},
		{"an unknown field", func() uint64 { return b.publishDeltaRaw([]byte(unknown), nil) }, `unknown field "colour"`},
		{"a roster message marked a delta", func() uint64 { return b.publishDeltaRaw(encodeRoster(t, r7), nil) }, `unknown field "roster_seq"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b.answered(c.send())
			if !strings.Contains(strings.ReplaceAll(b.logs.String(), `\"`, `"`), c.want) {
				t.Fatalf("the host's log does not say %q:\n%s", c.want, b.logs.String())
			}
			if got := webAnswers(t, names); !slices.Equal(got, []string{"10.1.0.6"}) {
				t.Fatalf("a refused delta is served: %v", got)
			}
			if seq := keptRosterSeq(t, b); seq != 6 {
				t.Fatalf("kept roster %d after a refusal, want 6", seq)
			}
		})
	}
	// Replayed: at the sequence held, or below it, it names nothing newer.
	refusals := strings.Count(b.logs.String(), "roster refused")
	b.answered(b.publishDelta(b.deltaTo(r5, raw5, r6), nil))
	b.answered(b.publishDelta(b.deltaTo(rosterDoc(3, "x"), encodeRoster(t, rosterDoc(3, "x")), rosterDoc(4, "10.9.9.9")), nil))
	if strings.Count(b.logs.String(), "roster refused") != refusals || keptRosterSeq(t, b) != 6 {
		t.Fatalf("a delta replayed was refused or taken:\n%s", b.logs.String())
	}

	// The controller's delta on the base held whose changes do not make
	// what it signed (an encoding that differs, or a fault): nothing of it
	// is kept; the host asks for the roster in force and keeps that.
	raw7 := encodeRoster(t, r7)
	b.answerRosters(func(spec.RosterRequest) []byte { return raw7 })
	for _, c := range []struct {
		name string
		lie  func(d *spec.RosterDelta)
	}{
		{"changes that make another roster", func(d *spec.RosterDelta) { d.SetRoutes = nil }},
		{"a signature over another roster", func(d *spec.RosterDelta) { d.FullSig = ed25519.Sign(otherKey, raw7) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			lie := b.deltaTo(r6, raw6, r7)
			c.lie(&lie)
			before := strings.Count(b.logs.String(), "makes a roster its signature does not verify; the roster in force is asked for")
			b.answered(b.publishDelta(lie, nil))
			if strings.Count(b.logs.String(), "makes a roster its signature does not verify; the roster in force is asked for") != before+1 {
				t.Fatalf("the host's log does not say the delta was not applied:\n%s", b.logs.String())
			}
			if st, _, _ := host.ReadState(b.hostDir); !bytes.Equal(st.Roster, raw7) {
				t.Fatalf("the host keeps\n%s\nwant the controller's answer\n%s", st.Roster, raw7)
			}
			servesWeb(t, names, "10.9.9.9")
			// Roster 6 again, for the next case.
			r6again := rosterDoc(8, "10.1.0.6")
			r6again.Names = r6.Names
			raw := encodeRoster(t, r6again)
			b.answered(b.publishRoster(raw, nil))
			r6, raw6, r7 = r6again, raw, rosterDoc(9, "10.9.9.9")
			raw7 = encodeRoster(t, r7)
		})
	}
}

// TestDeltaOnAnotherBaseAsksForTheRoster: a delta whose base the host does
// not hold (none, or another) is not applied to the names it holds: the
// host asks the controller for the roster in force, within the window the
// delta gives (nothing delivers the delta again: the host's own timer),
// and keeps what it answers, byte for byte. An expired one is refused and
// nothing is asked.
func TestDeltaOnAnotherBaseAsksForTheRoster(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	names := runResolver(t, resolver.Zone{})
	b.names = names
	r9 := rosterDoc(9, "10.1.0.9")
	raw9 := encodeRoster(t, r9)
	asked := make(chan spec.RosterRequest, 16)
	b.answerRosters(func(req spec.RosterRequest) []byte { asked <- req; return raw9 })
	b.start()

	expired := b.deltaTo(rosterDoc(7, "x"), []byte("seven"), rosterDoc(8, "10.9.9.9"))
	expired.Issued, expired.Expires = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	b.answered(b.publishDelta(expired, nil))
	if !strings.Contains(b.logs.String(), "the roster delta expired at") {
		t.Fatalf("an expired delta on another base was not refused:\n%s", b.logs.String())
	}
	select {
	case req := <-asked:
		t.Fatalf("an expired delta had the host ask for roster %d", req.Want)
	default:
	}

	d := b.deltaTo(rosterDoc(8, "x"), []byte("eight"), r9)
	d.FetchWithinMS = 1500
	b.answered(b.publishDelta(d, nil))
	// Acked at once; asked for at the moment drawn within the window.
	select {
	case req := <-asked:
		if req.Want != 9 {
			t.Fatalf("the host asked for roster %d, want 9", req.Want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the delta was answered and the roster not asked for")
	}
	servesWeb(t, names, "10.1.0.9")
	st, _, err := host.ReadState(b.hostDir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(st.Roster, raw9) {
		t.Fatalf("the host keeps\n%s\nwant the controller's answer\n%s", st.Roster, raw9)
	}
}
