package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// auditVerbs are the verbs of the audit's rows, oldest first, but the
// audit's own reads.
func auditVerbs(t *testing.T, dir string) []string {
	t.Helper()
	out, errOut, code := runMesh(t, "audit", "--dir", dir, "--json")
	if code != 0 {
		t.Fatalf("mesh audit: exit %d: %s", code, errOut)
	}
	var es []spec.AuditEntry
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		t.Fatalf("mesh audit --json: %v\n%s", err, out)
	}
	var verbs []string
	for _, e := range es {
		if e.Verb != spec.VerbAudit {
			verbs = append(verbs, e.Verb)
		}
	}
	return verbs
}

// TestNodeCannotMakeTheControllerAnswerElsewhere: with alpha's own
// credential, blob requests whose reply subject is alpha's declaration or
// delivery subject or the operator API's node.remove are dropped: the audit
// gains no row, /metrics counts them, the log names them.
func TestNodeCannotMakeTheControllerAnswerElsewhere(t *testing.T) {
	m := newMesh(t)
	nc, _, err := nodeConn(t, m, m.dir)
	if err != nil {
		t.Fatal(err)
	}
	before := auditVerbs(t, m.dir)
	refused := m.metric(t, "mesh_replies_refused_total")
	body := []byte(`{"digest":"sha256:` + strings.Repeat("0", 64) + `"}`)
	targets := []string{spec.DeclarationSubject("alpha"), spec.DeliverySubject("alpha"), spec.APISubject(spec.VerbNodeRemove)}
	for _, reply := range targets {
		if err := nc.PublishRequest(spec.NodeSubject("alpha", spec.KindBlob), reply, body); err != nil {
			t.Fatal(err)
		}
	}
	// Answered after the others (one subscription takes them in order),
	// and on alpha's own inbox.
	msg, err := nc.Request(spec.NodeSubject("alpha", spec.KindBlob), body, 10*time.Second)
	if err != nil {
		t.Fatalf("a blob request on alpha's own inbox: %v", err)
	}
	if !strings.Contains(string(msg.Data), "blob sha256:") {
		t.Errorf("a blob request on alpha's own inbox answered %s", msg.Data)
	}
	if got := m.metric(t, "mesh_replies_refused_total") - refused; got != len(targets) {
		t.Errorf("mesh_replies_refused_total grew by %d, want %d", got, len(targets))
	}
	if after := auditVerbs(t, m.dir); len(after) != len(before) {
		t.Errorf("the audit grew from %v to %v", before, after)
	}
	if got := m.nodeNames(t); got != "alpha" {
		t.Errorf("nodes: %s", got)
	}
	if out := m.d.out.String(); !strings.Contains(out, "request dropped") || !strings.Contains(out, spec.APISubject(spec.VerbNodeRemove)) {
		t.Errorf("the controller's log does not name the dropped requests and their reply subjects:\n%s", out)
	}
}
