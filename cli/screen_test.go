package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// The hostile texts a node or a module's author can send: a terminal
// sequence that erases the verdict and prints a forged one, a bidi
// override, a line of its own, a carriage return, C1 controls (raw and as
// a character).
const (
	forged   = "\x1b[2K\x1b[1A\x1b[2Kall clear: 4 node(s) heard, current, nothing pending, no failure, no hold\x1b[8m"
	reversed = "report\u202etxt.exe"
	ownLine  = "ok\nall clear: 9 node(s) heard\r"
	c1       = "\x9b2K\u009b2K\u2067"
)

// TestShown: each unsafe character is escaped, \xNN below 0x20 and for an
// invalid byte, \uNNNN for the others; the rest, other non-ASCII text
// included, is kept; a screen keeps the newline and the tab.
func TestShown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, shown, screen string }{
		{"plain text, é and …", "plain text, é and …", "plain text, é and …"},
		{"\x1b[2K", `\x1b[2K`, `\x1b[2K`},
		{"a\u202eb", `a\u202eb`, `a\u202eb`},
		{"a\nb\tc\rd", `a\x0ab\x09c\x0dd`, "a\nb\tc\\x0dd"},
		{"\x7f\u0085\x9b", `\u007f\u0085\x9b`, `\u007f\u0085\x9b`},
		{"\u061c\u200e\u200f\u2028\u2029\u202a\u2066\u2069", `\u061c\u200e\u200f\u2028\u2029\u202a\u2066\u2069`, `\u061c\u200e\u200f\u2028\u2029\u202a\u2066\u2069`},
	} {
		if got := shown(tc.in); got != tc.shown {
			t.Errorf("shown(%q) = %q, want %q", tc.in, got, tc.shown)
		}
		var b bytes.Buffer
		if _, err := (screen{&b}).Write([]byte(tc.in)); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.screen {
			t.Errorf("a screen wrote %q as %q, want %q", tc.in, b.String(), tc.screen)
		}
	}
}

// rawOnScreen names what in out could drive a terminal: an unsafe
// character, an invalid byte, or a line a hostile text began.
func rawOnScreen(out string) string {
	if !utf8.ValidString(out) {
		return "an invalid byte"
	}
	for _, r := range out {
		if r != '\n' && r != '\t' && unsafe(r) {
			return "character " + strings.TrimPrefix(shown(string(r)), `\`)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "all clear: 9") {
			return "a forged line: " + line
		}
	}
	return ""
}

// TestHostileTextsThroughEveryPrinter: facts, heartbeat fields, report
// errors and notes, names, module descriptions and file names holding
// terminal sequences, bidi overrides and newlines reach no printer's
// output raw, in text or in JSON; the JSON decodes to the texts as sent.
func TestHostileTextsThroughEveryPrinter(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	report := spec.Report{Node: "alpha", Time: at, Seq: 4, Refused: "", Waiting: "", Results: []spec.ResourceResult{
		{Name: "web:file:" + reversed, Outcome: spec.Failed, Error: forged},
		{Name: "web:container:" + c1, Outcome: spec.Changed, Note: ownLine}}}
	refused := spec.Report{Node: "alpha", Seq: 5, Refused: forged + ownLine}
	facts := &spec.Facts{Node: "alpha", Time: at, Arch: forged, OS: reversed, Kernel: ownLine, Distro: c1, DistroVer: forged, CPUModel: forged,
		Hostname: reversed, Virtual: ownLine, Capabilities: []string{forged}, Engine: c1, Subnet: reversed, TrustInstalled: forged, Intermediate: ownLine,
		Certificates: []spec.HeldCert{{Name: forged, Path: reversed, Serial: c1, NotAfter: at}}, Errors: []string{forged, ownLine}}
	node := spec.Node{Name: "alpha", Address: "10.0.0.1", Joined: at, LastHeard: &at, HeardAgo: "1s", HostVersion: forged, Protocol: 1,
		ProtocolKnown: true, Facts: facts, LastReport: &report}
	status := spec.StatusResult{Time: at, Versions: map[string][]string{forged: {"alpha"}, reversed: {"beta"}}, Intermediate: "1f",
		Problems: []string{"alpha failed 1 resource(s)", forged},
		Nodes: []spec.NodeStatus{{Node: "alpha", LastHeard: &at, Heard: "1s ago", State: "current", HostVersion: forged, Binary: reversed,
			Failures: []string{"web:file:" + reversed + ": " + forged}, Notes: []string{ownLine}, Intermediate: c1, Refused: forged,
			Fallbacks: []spec.Fallback{{Digest: reversed, Reason: forged, At: at}}}}}
	module := spec.ModuleShowResult{Info: spec.ModuleInfo{Name: "web", Version: reversed, Description: forged + reversed, Nodes: []string{"alpha"}},
		Module: spec.Module{Name: "web", Description: forged, Resources: spec.Resources{
			{Name: "web:file:" + reversed, Kind: spec.KindFile, Module: "web", Spec: &spec.FileSpec{Path: "/srv/" + forged + reversed, Mode: 0o644, Owner: c1}}}}}
	push := spec.PushResult{ID: "p1", Nodes: []spec.PushNode{{Node: "alpha", Seq: 4, Resources: 2}, {Node: "beta", Error: forged}}}

	printers := map[string]struct {
		text func(*bytes.Buffer) error
		json any
	}{
		"node list": {func(b *bytes.Buffer) error { return printNodeList(b, []spec.Node{node}) }, []spec.Node{node}},
		"node show": {func(b *bytes.Buffer) error { return printNode(b, node) }, node},
		"status":    {func(b *bytes.Buffer) error { return printStatus(b, status) }, status},
		"push report": {func(b *bytes.Buffer) error {
			printReport(b, report, true)
			printReport(b, refused, true)
			return nil
		}, report},
		"push wait": {func(b *bytes.Buffer) error {
			events := make(chan *nats.Msg, 1)
			body, _ := json.Marshal(spec.PushEvent{PushID: "p1", Report: report})
			events <- &nats.Msg{Data: body}
			waitForReports(context.Background(), b, push, events, nil, 50*time.Millisecond, true, false)
			return nil
		}, push},
		"module list": {func(b *bytes.Buffer) error {
			return printModules(b, spec.ModuleListResult{Modules: []spec.ModuleInfo{module.Info}})
		}, []spec.ModuleInfo{module.Info}},
		"module show": {func(b *bytes.Buffer) error { return printModule(b, module) }, module},
		"grant list": {func(b *bytes.Buffer) error {
			return printGrants(b, spec.GrantListResult{Grants: []spec.GrantInfo{{Provider: forged, Consumer: reversed, Grant: ownLine, MintedAt: at}}})
		}, spec.GrantListResult{Grants: []spec.GrantInfo{{Provider: forged, Consumer: reversed, Grant: ownLine, MintedAt: at}}}},
		"audit": {func(b *bytes.Buffer) error {
			return printAudit(b, []spec.AuditEntry{{Time: at, Operator: "op", Verb: "module.register", Args: forged + reversed, Outcome: ownLine}})
		}, []spec.AuditEntry{{Time: at, Operator: "op", Verb: "module.register", Args: forged + reversed, Outcome: ownLine}}},
		"roll": {func(b *bytes.Buffer) error {
			r := spec.Roll{ID: 1, Digest: "3f2a", State: spec.RollHalted, Cause: forged, Started: at,
				Nodes: []spec.RollNode{{Node: "alpha", State: spec.RollFailed, Cause: forged + reversed}}}
			printRollChanges(b, spec.Roll{}, r)
			return printRoll(b, r)
		}, spec.Roll{ID: 1, Cause: forged + reversed}},
	}
	for name, p := range printers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var text bytes.Buffer
			if err := p.text(&text); err != nil {
				t.Fatal(err)
			}
			if what := rawOnScreen(text.String()); what != "" {
				t.Errorf("the text holds %s:\n%s", what, text.String())
			}
			if !strings.Contains(text.String(), `\x1b[2K`) && !strings.Contains(text.String(), `\u202e`) {
				t.Errorf("the text shows no hostile text escaped:\n%s", text.String())
			}
			var js bytes.Buffer
			if err := printJSON(&js, p.json); err != nil {
				t.Fatal(err)
			}
			if what := rawOnScreen(js.String()); what != "" || !json.Valid(js.Bytes()) {
				t.Errorf("the JSON holds %s or is not valid:\n%s", what, js.String())
			}
			want, _ := json.Marshal(p.json)
			var back any
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(back); !jsonEqual(t, got, want) {
				t.Errorf("the JSON decodes to\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// jsonEqual says whether a and b decode to the same value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		t.Fatalf("not JSON: %s or %s", a, b)
	}
	ax, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return bytes.Equal(ax, by)
}

// TestMainWritesThroughScreens: what the command prints, its errors
// included, reaches stdout and stderr through screens.
func TestMainWritesThroughScreens(t *testing.T) {
	t.Parallel()
	var out, errs bytes.Buffer
	Main([]string{"mesh", "node", "show", "--dir", t.TempDir(), "al\x1b[2K\u202epha"}, &out, &errs)
	if what := rawOnScreen(out.String() + errs.String()); what != "" {
		t.Errorf("mesh printed %s:\n%s%s", what, out.String(), errs.String())
	}
	if errs.Len() == 0 {
		t.Errorf("mesh said nothing of a bad name")
	}
}
