package spec_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestEdgeStateCheck: a report a host sends passes, none included; each
// one a host does not send is refused, naming what is wrong.
func TestEdgeStateCheck(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	good := spec.EdgeState{Node: "alpha", Time: at, Edge: "edge", Names: []spec.EdgeName{
		{Name: "drive.example.org", State: spec.EdgeValid, NotAfter: at.Add(90 * 24 * time.Hour)},
		{Name: "www.example.org", State: spec.EdgeFailed, Error: "no such host", ErrorAt: at, Retry: at.Add(time.Minute)},
	}}
	for _, s := range []spec.EdgeState{good, {Node: "alpha"}, {Node: "a", Edge: "edge", Omitted: 3}} {
		if err := s.Check(); err != nil {
			t.Errorf("%+v refused: %v", s, err)
		}
	}
	many := make([]spec.EdgeName, spec.MaxEdgeNames+1)
	for i := range many {
		many[i] = spec.EdgeName{Name: fmt.Sprintf("n%d.example.org", i), State: spec.EdgeValid}
	}
	for _, tc := range []struct {
		want string
		bad  func(*spec.EdgeState)
	}{
		{"edge name", func(s *spec.EdgeState) { s.Edge = "Edge\x1b[2K" }},
		{"no edge running", func(s *spec.EdgeState) { s.Edge = "" }},
		{"more than", func(s *spec.EdgeState) { s.Names = many }},
		{"omitted -1", func(s *spec.EdgeState) { s.Omitted = -1 }},
		{"not a domain name", func(s *spec.EdgeState) { s.Names[0].Name = "localhost" }},
		{"under .internal", func(s *spec.EdgeState) { s.Names[0].Name = "web.alpha.internal" }},
		{"253", func(s *spec.EdgeState) { s.Names[0].Name = strings.Repeat("a.", 1<<20) + "org" }},
		{"listed twice", func(s *spec.EdgeState) { s.Names[1].Name = s.Names[0].Name }},
		{"state", func(s *spec.EdgeState) { s.Names[1].State = "fine\u202e" }},
	} {
		s := good
		s.Names = append([]spec.EdgeName(nil), good.Names...)
		tc.bad(&s)
		err := s.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("refused with %v, want an error saying %q", err, tc.want)
		}
		if err != nil && len(err.Error()) > 1024 {
			t.Errorf("an error of %d bytes: %.80s…", len(err.Error()), err)
		}
	}
}

// FuzzDecodeEdgeState: whatever a host sends on its edge subject either
// fails to decode or decodes to a report that encodes and decodes to
// itself; one that passes Check is within its bounds (names that are
// domain names, once each, states of the four).
func FuzzDecodeEdgeState(f *testing.F) {
	for _, seed := range []string{
		`{"node":"alpha","time":"2026-12-05T10:00:00Z","edge":"edge","names":[{"name":"drive.example.org","state":"valid","not_after":"2027-03-05T10:00:00Z"},{"name":"www.example.org","state":"failed","error":"connection refused","error_at":"2026-12-05T09:59:00Z","retry":"2026-12-05T10:00:00Z"}]}`,
		`{"node":"a","edge":"e","omitted":7}`,
		`{"node":"a","names":[{"name":"x.example.org","state":"valid"}]}`,
		`{"node":"a","edge":"e","names":[{"name":"x.internal","state":"valid"}]}`,
		`{"node":"a","edge":"e","names":[{"name":"x.example.org","state":"\u001b[2K"}]}`,
		`{"node":"a","edge":"e","names":[{"name":"x.example.org","state":"failed","error":"` + "\u202e" + `"}]}`,
		`{"node":"a","edge":"e","names":[{"name":"x.example.org","state":"valid","not_after":"0001-01-01T00:00:00+01:00"}]}`,
		`{}`, `null`, `[`, ``, `{"node":"a"} {}`, `{"nodes":"a"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s spec.EdgeState
		if err := spec.Decode(data, &s); err != nil {
			return
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("decoded %q to %+v, which does not encode: %v", data, s, err)
		}
		var s2 spec.EdgeState
		if err := spec.Decode(again, &s2); err != nil || !reflect.DeepEqual(normalEdge(s), normalEdge(s2)) {
			t.Fatalf("%q decoded to %+v, encoded to %q, decoded again to %+v (%v)", data, s, again, s2, err)
		}
		if s.Check() != nil {
			return
		}
		seen := map[string]bool{}
		for _, n := range s.Names {
			if spec.CheckDomain(n.Name) != nil || seen[n.Name] {
				t.Fatalf("Check passed name %q", n.Name)
			}
			seen[n.Name] = true
			switch n.State {
			case spec.EdgeObtaining, spec.EdgeValid, spec.EdgeFailed, spec.EdgeExpired:
			default:
				t.Fatalf("Check passed state %q", n.State)
			}
		}
		if len(s.Names) > spec.MaxEdgeNames || s.Omitted < 0 {
			t.Fatalf("Check passed %d names, %d omitted", len(s.Names), s.Omitted)
		}
	})
}

// normalEdge is s with its times as instants (a round trip keeps the
// instant, not the location) and its empty list nil.
func normalEdge(s spec.EdgeState) spec.EdgeState {
	s.Time = s.Time.UTC()
	var names []spec.EdgeName
	for _, n := range s.Names {
		n.NotAfter, n.ErrorAt, n.Retry = n.NotAfter.UTC(), n.ErrorAt.UTC(), n.Retry.UTC()
		names = append(names, n)
	}
	s.Names = names
	return s
}
