package host_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestOtherProtocolRefused: a declaration of another protocol than the
// host's, older or newer, is refused, reported with a reason naming both
// protocols and what to do, and nothing of it is kept or applied; a roster
// message of another protocol is refused the same way, and the host keeps
// the roster it holds.
func TestOtherProtocolRefused(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start()
	for i, p := range []int{spec.Protocol - 1, spec.Protocol + 1} {
		d := b.declaration(uint64(i+1), fileResource("/other", "x"))
		d.Protocol = p
		b.publish(encode(t, d), nil)
		r := b.report()
		for r.Seq != uint64(i+1) { // the last one's, refused again as the host caught up
			r = b.report()
		}
		for _, want := range []string{fmt.Sprintf("protocol %d", p), fmt.Sprintf("protocol %d", spec.Protocol), "mesh release roll"} {
			if !strings.Contains(r.Refused, want) {
				t.Fatalf("a declaration of protocol %d: refused %q, want it to name %q", p, r.Refused, want)
			}
		}
		if r.Seq != uint64(i+1) || b.exists("/other") {
			t.Fatalf("a declaration of protocol %d: report %+v, /other exists %v", p, r, b.exists("/other"))
		}
	}
	if st, _, err := host.ReadState(b.hostDir); err != nil || st.Seq != 0 {
		t.Fatalf("kept %d (%v) after declarations of other protocols, want none", st.Seq, err)
	}
	b.publish(encode(t, b.declaration(3, fileResource("/same", "y"))), nil)
	if r := b.report(); r.Seq != 3 || r.Refused != "" || !b.exists("/same") {
		t.Fatalf("a declaration of protocol %d after the refusals: %+v", spec.Protocol, r)
	}

	doc := rosterDoc(1, "10.1.0.1")
	doc.Protocol = spec.Protocol - 1
	b.publishRoster(encodeRoster(t, doc), nil)
	b.publishRoster(encodeRoster(t, rosterDoc(2, "10.1.0.2")), nil)
	poll.Until(t, 20*time.Second, "roster 2 kept", func() error {
		seq := keptRosterSeq(t, b)
		if seq == 2 {
			return nil
		}
		return fmt.Errorf("kept roster %d", seq)
	})
	logs := b.logs.String()
	if !strings.Contains(logs, "roster refused") || !strings.Contains(logs, fmt.Sprintf("protocol %d refused", spec.Protocol-1)) {
		t.Fatalf("a roster of protocol %d was not refused for it:\n%s", spec.Protocol-1, logs)
	}
}
