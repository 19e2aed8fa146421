package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// liarMesh is a mesh of alpha (genesis) and beta, both sent declaration 1
// and applied it, then beta's host stopped and the test connected with
// beta's own credential: what beta sends now, the test chose.
func liarMesh(t *testing.T) (*testMesh, func(subject string, v any) int) {
	t.Helper()
	m := newMesh(t)
	betaDir, h := m.join(t, "beta")
	if o, code := pushJSON(t, m.dir); code != 0 {
		t.Fatalf("first push: exit %d %+v", code, o)
	}
	h.stop(t)
	nc, _, err := nodeConn(t, m, betaDir)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, v any) int {
		t.Helper()
		// As a node may send it: nothing escaped that JSON does not require.
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(subject, bytes.TrimSpace(b.Bytes())); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return len(bytes.TrimSpace(b.Bytes()))
	}
	return m, publish
}

// TestALyingNodeStopsNoPush: a node whose heartbeat claims it applied
// declaration 2^63-1 stops no push: the next push sends every node its next
// declaration (beta's numbered after the last sent to it, not after its
// claim), alpha applies it, and status names beta and what it claimed.
func TestALyingNodeStopsNoPush(t *testing.T) {
	t.Parallel()
	m, publish := liarMesh(t)
	publish(spec.NodeSubject("beta", spec.KindHeartbeat), spec.Heartbeat{Node: "beta", Time: time.Now(), AppliedSeq: math.MaxInt64, Protocol: spec.Protocol})
	poll.Until(t, 10*time.Second, "status names beta's claim", func() error {
		st, _ := statusOf(t, m.dir)
		if strings.Contains(strings.Join(st.Problems, "\n"), "beta reports applying declaration 9223372036854775807") {
			return nil
		}
		return errors.New(strings.Join(st.Problems, "\n"))
	})

	// --force: the content is what both nodes hold; the push must still be
	// numbered past the lie.
	o, code := pushJSON(t, m.dir, "--force", "--wait", "10s")
	seqs := map[string]uint64{}
	for _, n := range o.Nodes {
		seqs[n.Node] = n.Seq
		if n.Error != "" {
			t.Errorf("push: %s not sent: %s", n.Node, n.Error)
		}
	}
	if seqs["alpha"] != 2 || seqs["beta"] != 2 {
		t.Fatalf("push sent %v, want declaration 2 to alpha and to beta (exit %d)", seqs, code)
	}
	if r := reportOf(t, o, "alpha"); r == nil || r.Refused != "" {
		t.Fatalf("alpha did not apply the push: %+v", r)
	}
	if code != 1 || strings.Join(o.Silent, ",") != "beta" {
		t.Fatalf("push: exit %d, silent %v; want beta, whose host is stopped, named silent", code, o.Silent)
	}

	// A claim past what the store keeps: the same.
	publish(spec.NodeSubject("beta", spec.KindHeartbeat), spec.Heartbeat{Node: "beta", Time: time.Now(), AppliedSeq: math.MaxUint64, Protocol: spec.Protocol})
	poll.Until(t, 10*time.Second, "status names beta's larger claim", func() error {
		st, _ := statusOf(t, m.dir)
		var beta spec.NodeStatus
		for _, n := range st.Nodes {
			if n.Node == "beta" {
				beta = n
			}
		}
		problems := strings.Join(st.Problems, "\n")
		if strings.Contains(problems, "beta reports applying declaration 18446744073709551615, more than 1048576 above the last sent to it (2): not believed") &&
			beta.State == "not believed" && beta.SentSeq == 2 && !st.AllClear {
			return nil
		}
		return fmt.Errorf("%s: %+v", problems, beta)
	})
	out, _, code := runMesh(t, "status", "--dir", m.dir)
	if code != 1 || !strings.Contains(out, "beta reports applying declaration 18446744073709551615") {
		t.Fatalf("mesh status: exit %d\n%s", code, out)
	}
	if o, _ := pushJSON(t, m.dir, "--force", "--wait", "5s", "alpha"); len(o.Nodes) != 1 || o.Nodes[0].Seq != 3 || o.Nodes[0].Error != "" {
		t.Fatalf("push to alpha after beta's claims: %+v", o.Nodes)
	}
	if log := m.d.out.String(); strings.Contains(log, "high bit") || strings.Contains(log, "push stopped") {
		t.Fatalf("the controller's log shows a store refusal:\n%s", log)
	}
}

// TestOversizedReportBlindsNobody: a node that sends a 3.8 MB report whose
// every text escapes six-fold in JSON does not stop node list, node show or
// status from answering, each at once, with the texts cut and marked and
// the results past the cap counted.
func TestOversizedReportBlindsNobody(t *testing.T) {
	t.Parallel()
	m, publish := liarMesh(t)
	r := spec.Report{Node: "beta", Seq: 1, Time: time.Now(), Digest: strings.Repeat(">", 10000), Results: []spec.ResourceResult{}}
	for i := range 2000 {
		r.Results = append(r.Results, spec.ResourceResult{Name: fmt.Sprintf("m:file:/f%d", i), Kind: spec.KindFile, Outcome: spec.Failed,
			Error: strings.Repeat("<", 1000), Note: strings.Repeat("&", 900)})
	}
	encoded, _ := json.Marshal(r)
	sent := publish(spec.NodeSubject("beta", spec.KindReport), r)

	var beta spec.Node
	poll.Until(t, 20*time.Second, "node show beta shows the report", func() error {
		out, errOut, code := runMesh(t, "node", "show", "--dir", m.dir, "--json", "beta")
		if code != 0 {
			t.Fatalf("mesh node show: exit %d: %s", code, errOut)
		}
		beta = spec.Node{}
		err := json.Unmarshal([]byte(out), &beta)
		if err == nil && beta.LastReport != nil && beta.LastReport.Omitted > 0 {
			return nil
		}
		return fmt.Errorf("%d bytes, %v", len(out), err)
	})
	kept, _ := json.Marshal(beta.LastReport)
	t.Logf("a report of %d bytes on the wire (%d once encoded as the controller encodes) is kept as %d bytes: %d results of %d, %d not kept",
		sent, len(encoded), len(kept), len(beta.LastReport.Results), len(r.Results), beta.LastReport.Omitted)
	if len(kept) > spec.MaxReportKept || len(beta.LastReport.Results)+beta.LastReport.Omitted != len(r.Results) ||
		!strings.HasSuffix(beta.LastReport.Results[0].Error, " bytes cut]") || !strings.HasSuffix(beta.LastReport.Digest, " bytes cut]") {
		t.Fatalf("the kept report: %d bytes, %d results, %d omitted, first error %.40q", len(kept), len(beta.LastReport.Results), beta.LastReport.Omitted, beta.LastReport.Results[0].Error)
	}

	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"node", "show", "beta"}, 0, []string{"bytes cut]", "not kept", "result(s): the node sent a report larger than the controller keeps"}},
		{[]string{"node", "list"}, 0, []string{"beta"}},
		{[]string{"node", "list", "--json"}, 0, []string{`"omitted": ` + fmt.Sprint(beta.LastReport.Omitted)}},
		{[]string{"status"}, 1, []string{"bytes cut]", "more: mesh node show beta lists them", "beta sent a report larger than the controller keeps"}},
		{[]string{"status", "--json"}, 1, []string{"bytes cut]"}},
	} {
		args := append([]string{tc.args[0], "--dir", m.dir}, tc.args[1:]...)
		if tc.args[0] == "node" {
			args = append([]string{"node", tc.args[1], "--dir", m.dir}, tc.args[2:]...)
		}
		out, errOut, code := runMesh(t, args...)
		if code != tc.code {
			t.Errorf("mesh %s: exit %d, want %d: %s", strings.Join(tc.args, " "), code, tc.code, errOut)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("mesh %s: no %q in %d bytes:\n%.2000s", strings.Join(tc.args, " "), w, len(out), out)
			}
		}
		if len(out) > spec.MaxReply {
			t.Errorf("mesh %s printed %d bytes", strings.Join(tc.args, " "), len(out))
		}
	}
}
