package spec_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"web1", true},
		{"a-b", true},
		{"0", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{"-a", false},
		{"a-", false},
		{"-", false},
		{"A", false},
		{"a_b", false},
		{"a.b", false},
		{"a b", false},
		{"é", false},
		{strings.Repeat("a", 64), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := spec.CheckName("node", tt.name)
			if tt.ok {
				if err != nil {
					t.Fatalf("CheckName(%q) = %v, want nil", tt.name, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckName(%q) = nil, want an error", tt.name)
			}
			msg := err.Error()
			if !strings.Contains(msg, "node name") {
				t.Errorf("CheckName(%q) error %q does not say what was checked", tt.name, msg)
			}
			if tt.name == "" {
				if !strings.Contains(msg, "empty") {
					t.Errorf("CheckName(\"\") error %q does not say the name is empty", msg)
				}
			} else if !strings.Contains(msg, `"`+tt.name+`"`) {
				t.Errorf("CheckName(%q) error %q does not name the value", tt.name, msg)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr string // "" for success
	}{
		{"valid", `{"node":"alpha","time":"2024-05-01T10:00:00Z","applied_seq":7,"host_version":"abc","protocol":1}`, ""},
		{"valid with trailing whitespace", "{\"node\":\"alpha\"}\n\t ", ""},
		{"unknown field", `{"node":"alpha","nodes":"beta"}`, "unknown field"},
		{"trailing object", `{"node":"a"} {}`, "trailing data"},
		{"trailing garbage", `{"node":"a"} x`, "trailing data"},
		{"trailing value", `{"node":"a"}1`, "trailing data"},
		{"wrong type", `{"applied_seq":"7"}`, "cannot unmarshal"},
		{"empty", ``, "EOF"},
		{"truncated", `{"node":"a"`, "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hb spec.Heartbeat
			err := spec.Decode([]byte(tt.body), &hb)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode(%s) = %v, want nil", tt.body, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode(%s) = nil (got %+v), want an error containing %q", tt.body, hb, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Decode(%s) = %v, want an error containing %q", tt.body, err, tt.wantErr)
			}
		})
	}
}

func TestDecodeHeartbeatFields(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name, body string
		want       spec.Heartbeat
	}{
		{"with its interval", `{"node":"alpha","time":"2024-05-01T10:00:00Z","applied_seq":7,"host_version":"abc","protocol":1,"interval_ms":1000}`,
			spec.Heartbeat{Node: "alpha", Time: at, AppliedSeq: 7, HostVersion: "abc", Protocol: 1, IntervalMS: 1000}},
		// An older host's heartbeat says no interval: it decodes, with zero.
		{"without an interval", `{"node":"alpha","time":"2024-05-01T10:00:00Z","applied_seq":7,"host_version":"abc","protocol":1}`,
			spec.Heartbeat{Node: "alpha", Time: at, AppliedSeq: 7, HostVersion: "abc", Protocol: 1}},
	}
	for _, tt := range tests {
		var hb spec.Heartbeat
		if err := spec.Decode([]byte(tt.body), &hb); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !heartbeatsEqual(hb, tt.want) {
			t.Errorf("%s: Decode = %+v, want %+v", tt.name, hb, tt.want)
		}
	}
}

func TestNodeFromSubject(t *testing.T) {
	tests := []struct {
		subject    string
		node, kind string
		ok         bool
	}{
		{"mesh.node.alpha.heartbeat", "alpha", "heartbeat", true},
		{"mesh.node.alpha.facts", "alpha", "facts", true},
		{spec.NodeSubject("web1", spec.KindFacts), "web1", "facts", true},
		{"mesh.node.alpha.req.x", "alpha", "req.x", true},
		{"mesh.node.alpha", "", "", false},
		{"mesh.node.alpha.", "", "", false},
		{"mesh.node..heartbeat", "", "", false},
		{"mesh.node.", "", "", false},
		{"other.x.y", "", "", false},
		{"mesh.api.v1.node.list", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.subject, func(t *testing.T) {
			node, kind, ok := spec.NodeFromSubject(tt.subject)
			if node != tt.node || kind != tt.kind || ok != tt.ok {
				t.Errorf("NodeFromSubject(%q) = %q, %q, %v; want %q, %q, %v",
					tt.subject, node, kind, ok, tt.node, tt.kind, tt.ok)
			}
		})
	}
}

func TestNodeSubjectRoundTrip(t *testing.T) {
	for _, kind := range []string{spec.KindHeartbeat, spec.KindFacts} {
		subj := spec.NodeSubject("alpha", kind)
		node, k, ok := spec.NodeFromSubject(subj)
		if !ok || node != "alpha" || k != kind {
			t.Errorf("NodeFromSubject(NodeSubject(alpha, %s)) = %q, %q, %v", kind, node, k, ok)
		}
	}
}

// ownSubject reports whether subject s can match only subjects of node: node
// appears as a whole token and no wildcard comes before it.
func ownSubject(node, s string) bool {
	for _, tok := range strings.Split(s, ".") {
		switch tok {
		case node:
			return true
		case "*", ">":
			return false
		}
	}
	return false
}

func TestNodePermissions(t *testing.T) {
	p := spec.NodePermissions("alpha")
	// Its own subjects alone.
	if !reflect.DeepEqual(p.Publish, []string{"mesh.node.alpha.>"}) {
		t.Errorf("Publish = %q, want only [mesh.node.alpha.>]", p.Publish)
	}
	if !slices.Contains(p.Subscribe, "_INBOX.alpha.>") {
		t.Errorf("Subscribe = %q, want it to hold _INBOX.alpha.> (the node's own replies)", p.Subscribe)
	}
	// The one subject beyond its own: the mesh's roster messages, which
	// every node reads (as its consumer delivered them before protocol
	// 5) and none publishes.
	if !slices.Contains(p.Subscribe, spec.RosterDelivery) || slices.Contains(p.Publish, spec.RosterDelivery) {
		t.Errorf("Subscribe = %q, Publish = %q: want %s read, never published", p.Subscribe, p.Publish, spec.RosterDelivery)
	}
	all := append(append([]string(nil), p.Publish...), p.Subscribe...)
	for _, s := range all {
		if strings.HasPrefix(s, "$JS.API") || s == ">" || s == "_INBOX.>" || s == "*" {
			t.Errorf("node alpha holds %q: a node holds no JetStream API or catch-all permission", s)
		}
		if !ownSubject("alpha", s) && s != spec.RosterDelivery {
			t.Errorf("node alpha holds %q, which reaches beyond its own subjects", s)
		}
	}
	// Two nodes share nothing but the roster they both read.
	beta := spec.NodePermissions("beta")
	for _, s := range append(append([]string(nil), beta.Publish...), beta.Subscribe...) {
		if slices.Contains(all, s) && s != spec.RosterDelivery {
			t.Errorf("nodes alpha and beta both hold %q", s)
		}
	}
}

func TestOwnSubject(t *testing.T) {
	// The helper above decides TestNodePermissions: check it refuses what it must.
	tests := []struct {
		s  string
		ok bool
	}{
		{"mesh.node.alpha.>", true},
		{"_INBOX.alpha.>", true},
		{"_DELIVER.DECLARATIONS.alpha", true},
		{"mesh.node.*.>", false},
		{"mesh.node.>", false},
		{"_INBOX.>", false},
		{"mesh.node.alphabet.>", false},
		{"mesh.node.beta.>", false},
		{">", false},
	}
	for _, tt := range tests {
		if got := ownSubject("alpha", tt.s); got != tt.ok {
			t.Errorf("ownSubject(alpha, %q) = %v, want %v", tt.s, got, tt.ok)
		}
	}
}

func heartbeatsEqual(a, b spec.Heartbeat) bool {
	return a.Node == b.Node && a.Time.Equal(b.Time) && a.AppliedSeq == b.AppliedSeq &&
		a.HostVersion == b.HostVersion && a.Protocol == b.Protocol && a.IntervalMS == b.IntervalMS
}

// factsEqual compares facts by value: times by instant, and a nil Errors the
// same as an empty one (omitempty drops an empty list when re-encoded).
func factsEqual(a, b spec.Facts) bool {
	if !a.Time.Equal(b.Time) {
		return false
	}
	if len(a.Errors) != len(b.Errors) || (len(a.Errors) > 0 && !reflect.DeepEqual(a.Errors, b.Errors)) {
		return false
	}
	a.Time, b.Time = time.Time{}, time.Time{}
	a.Errors, b.Errors = nil, nil
	return reflect.DeepEqual(a, b)
}

func FuzzDecodeHeartbeat(f *testing.F) {
	for _, seed := range []string{
		`{"node":"alpha","time":"2024-05-01T10:00:00Z","applied_seq":7,"host_version":"abc","protocol":1}`,
		`{"node":"a","time":"2024-05-01T10:00:00.123456789+02:00"}`,
		`{}`,
		`null`,
		`{"node":"a"} {}`,
		`{"nodes":"a"}`,
		`{"applied_seq":-1}`,
		`{"time":"not a time"}`,
		`[`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var hb spec.Heartbeat
		if err := spec.Decode(data, &hb); err != nil {
			return
		}
		again, err := json.Marshal(hb)
		if err != nil {
			t.Fatalf("decoded %q to %+v, which does not encode: %v", data, hb, err)
		}
		var hb2 spec.Heartbeat
		if err := spec.Decode(again, &hb2); err != nil {
			t.Fatalf("decoded %q, re-encoded %s, which does not decode: %v", data, again, err)
		}
		if !heartbeatsEqual(hb, hb2) {
			t.Fatalf("decoded %q to %+v; re-encoded %s decodes to %+v", data, hb, again, hb2)
		}
	})
}

func FuzzDecodeFacts(f *testing.F) {
	for _, seed := range []string{
		`{"node":"alpha","time":"2024-05-01T10:00:00Z","arch":"amd64","os":"linux","kernel":"6.1","distro":"Debian","distro_version":"12","cpu_model":"x","cores":4,"memory_bytes":1024,"disk_bytes":2048,"disk_free_bytes":1,"virtual":"physical","uptime_seconds":5,"hostname":"h","errors":["disk: x"]}`,
		`{"errors":[]}`,
		`{"errors":null}`,
		`{"cores":1.5}`,
		`{"unknown":1}`,
		`{} []`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fa spec.Facts
		if err := spec.Decode(data, &fa); err != nil {
			return
		}
		again, err := json.Marshal(fa)
		if err != nil {
			t.Fatalf("decoded %q to %+v, which does not encode: %v", data, fa, err)
		}
		var fa2 spec.Facts
		if err := spec.Decode(again, &fa2); err != nil {
			t.Fatalf("decoded %q, re-encoded %s, which does not decode: %v", data, again, err)
		}
		if !factsEqual(fa, fa2) {
			t.Fatalf("decoded %q to %+v; re-encoded %s decodes to %+v", data, fa, again, fa2)
		}
	})
}

// FuzzParseManifest: the manifest parser never panics, and what it accepts
// resolves into a module that passes the controller's check.
func FuzzParseManifest(f *testing.F) {
	for _, seed := range manifestSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := spec.ParseManifest(data)
		if err != nil {
			return
		}
		mod, err := m.Resolve(func(string) (spec.Content, error) { return spec.ContentOf([]byte("source")), nil })
		if err != nil {
			t.Fatalf("a parsed manifest does not resolve: %v", err)
		}
		if err := mod.Check(); err != nil {
			t.Fatalf("a parsed manifest resolves to a module the controller refuses: %v\n%s", err, data)
		}
	})
}
