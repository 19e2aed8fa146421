package spec_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestDeltaMakesTheSignedBytes: the changes from one roster to another,
// applied to the first, encode (as the roster message the controller
// signs) to exactly the bytes of the second: what makes a delta's
// signature verify on a host. Each case is one kind of change.
func TestDeltaMakesTheSignedBytes(t *testing.T) {
	t.Parallel()
	node := func(name, addr string) spec.RosterNode { return spec.RosterNode{Name: name, Address: addr} }
	route := func(name, node string, port int) spec.RosterRoute {
		return spec.RosterRoute{Name: spec.RouteName(name, node), Node: node, Address: "10.0.0.1", Port: port, Module: "m"}
	}
	base := spec.Roster{Nodes: []spec.RosterNode{node("alpha", "10.0.0.1"), node("beta", "10.0.0.2")},
		Routes: []spec.RosterRoute{route("web", "alpha", 80), route("web", "beta", 80)}}
	empty := spec.Roster{Nodes: []spec.RosterNode{}, Routes: []spec.RosterRoute{}}
	edit := func(f func(r *spec.Roster)) spec.Roster {
		r := spec.Roster{Nodes: append([]spec.RosterNode{}, base.Nodes...), Routes: append([]spec.RosterRoute{}, base.Routes...)}
		f(&r)
		return r
	}
	for _, c := range []struct {
		name     string
		from, to spec.Roster
		changes  int
	}{
		{"nothing", base, base, 0},
		{"a node joins", base, edit(func(r *spec.Roster) { r.Nodes = append(r.Nodes, node("aaa", "10.0.0.3")) }), 1},
		{"a node leaves", base, edit(func(r *spec.Roster) { r.Nodes = r.Nodes[1:] }), 1},
		{"a node moves", base, edit(func(r *spec.Roster) { r.Nodes[1].Address = "10.0.9.9" }), 1},
		{"a route added", base, edit(func(r *spec.Roster) { r.Routes = append(r.Routes, route("admin", "alpha", 81)) }), 1},
		{"a route removed", base, edit(func(r *spec.Roster) { r.Routes = r.Routes[:1] }), 1},
		{"a route's port", base, edit(func(r *spec.Roster) { r.Routes[0].Port = 8080 }), 1},
		{"a route made public", base, edit(func(r *spec.Roster) { r.Routes[0].Public = true }), 1},
		{"from nothing", empty, base, 4},
		{"to nothing", base, empty, 4},
		{"controllers given", base, edit(func(r *spec.Roster) { r.Controllers = []string{"nats://192.0.2.1:4222", "nats://192.0.2.2:4222"} }), 0},
		{"a controller joins", edit(func(r *spec.Roster) { r.Controllers = []string{"nats://192.0.2.1:4222"} }),
			edit(func(r *spec.Roster) { r.Controllers = []string{"nats://192.0.2.1:4222", "nats://192.0.2.2:4222"} }), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			to := c.to
			to.Normalize()
			now := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
			want, err := json.Marshal(spec.RosterDoc{Mesh: "m", Seq: 7, Issued: now, Expires: now.Add(time.Hour), Protocol: spec.Protocol, Names: to})
			if err != nil {
				t.Fatal(err)
			}
			// The controllers travel whole, as the controller sends them.
			d := spec.RosterDelta{Mesh: "m", Seq: 7, Base: 6, Issued: now, Expires: now.Add(time.Hour), Protocol: spec.Protocol, Controllers: to.Controllers}
			d.SetNodes, d.DropNodes, d.SetRoutes, d.DropRoutes = spec.Changes(c.from, to)
			if n := len(d.SetNodes) + len(d.DropNodes) + len(d.SetRoutes) + len(d.DropRoutes); n != c.changes {
				t.Errorf("%d changes, want %d: %+v", n, c.changes, d)
			}
			// Through the wire, as a host receives it.
			wire, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			var got spec.RosterDelta
			if err := spec.Decode(wire, &got); err != nil {
				t.Fatal(err)
			}
			_, raw, err := got.Doc(c.from)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw, want) {
				t.Fatalf("the delta makes\n%s\nwant\n%s", raw, want)
			}
		})
	}
}

// TestDeltaIsSmallForOneChange: at a thousand nodes, one route added is a
// delta of under a hundredth of the roster's bytes.
func TestDeltaIsSmallForOneChange(t *testing.T) {
	t.Parallel()
	var from spec.Roster
	for i := range 1000 {
		from.Nodes = append(from.Nodes, spec.RosterNode{Name: fmt.Sprintf("n%04d", i), Address: fmt.Sprintf("10.0.%d.%d", i/256, i%256)})
	}
	to := spec.Roster{Nodes: from.Nodes, Routes: []spec.RosterRoute{{Name: spec.RouteName("web", "n0001"), Node: "n0001", Address: "10.0.0.1", Port: 80, Module: "web"}}}
	from.Normalize()
	to.Normalize()
	whole, _ := json.Marshal(spec.RosterDoc{Mesh: "m", Seq: 2, Names: to})
	d := spec.RosterDelta{Mesh: "m", Seq: 2, Base: 1}
	d.SetNodes, d.DropNodes, d.SetRoutes, d.DropRoutes = spec.Changes(from, to)
	delta, _ := json.Marshal(d)
	if len(delta)*100 > len(whole) {
		t.Fatalf("the delta is %d bytes, the roster %d: want under a hundredth", len(delta), len(whole))
	}
}

// FuzzDecodeRosterDelta: a roster delta decodes strictly; what decodes
// encodes and decodes again to the same delta; a numbered delta's bytes
// decode neither as a roster message nor as a declaration.
func FuzzDecodeRosterDelta(f *testing.F) {
	for _, seed := range []string{
		`{"mesh":"m","delta_seq":4,"base_seq":3,"base_digest":"sha256:ab","issued":"2026-05-01T10:00:00Z","expires":"2026-05-02T10:00:00Z","protocol":4,"set_nodes":[{"name":"alpha","address":"10.0.0.1"}],"drop_nodes":["beta"],"set_routes":[{"name":"web.alpha.internal","node":"alpha","address":"10.0.0.1","port":80,"module":"web"}],"drop_routes":[{"name":"web.beta.internal","node":"beta"}],"full_sig":"AAAA","fetch_within_ms":300}`,
		`{"mesh":"m","delta_seq":1,"base_seq":0,"full_sig":null}`,
		`{"mesh":"m","delta_seq":5,"base_seq":4,"controllers":["nats://192.0.2.1:4222","nats://192.0.2.2:4222"],"full_sig":"AAAA"}`,
		`{"mesh":"m","roster_seq":1,"names":{"nodes":[],"routes":[]}}`,
		`{"mesh":"m","delta_seq":1,"fetch_within_ms":-5}`,
		`{"mesh":"m","delta_seq":1,"drop_routes":[{"name":1}]}`,
		`{"delta_seq":1} {}`,
		`{}`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d spec.RosterDelta
		if err := spec.Decode(data, &d); err != nil {
			return
		}
		var doc spec.RosterDoc
		var decl spec.Declaration
		if d.Seq != 0 && (spec.Decode(data, &doc) == nil || spec.Decode(data, &decl) == nil) {
			t.Fatalf("%q decodes as a numbered delta and as a roster message or a declaration", data)
		}
		if d.FetchWithin() < 0 {
			t.Fatalf("%q: a window of %s", data, d.FetchWithin())
		}
		again, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("decoded %q to %+v, which does not encode: %v", data, d, err)
		}
		var d2 spec.RosterDelta
		if err := spec.Decode(again, &d2); err != nil {
			t.Fatalf("decoded %q, re-encoded %s, which does not decode: %v", data, again, err)
		}
		if !d.Issued.Equal(d2.Issued) || !d.Expires.Equal(d2.Expires) {
			t.Fatalf("times changed: %s", again)
		}
		d.Issued, d.Expires = d2.Issued, d2.Expires
		// An empty list and none encode alike (omitempty).
		for _, x := range []*spec.RosterDelta{&d, &d2} {
			if len(x.FullSig) == 0 {
				x.FullSig = nil
			}
			if len(x.SetNodes) == 0 {
				x.SetNodes = nil
			}
			if len(x.DropNodes) == 0 {
				x.DropNodes = nil
			}
			if len(x.SetRoutes) == 0 {
				x.SetRoutes = nil
			}
			if len(x.DropRoutes) == 0 {
				x.DropRoutes = nil
			}
		}
		if !reflect.DeepEqual(d, d2) {
			t.Fatalf("decoded %q to %+v; re-encoded %s decodes to %+v", data, d, again, d2)
		}
		d.Apply(spec.Roster{}) // never panics
	})
}
