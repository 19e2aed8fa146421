package spec_test

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// FuzzDecodeOverlayState: whatever a host sends on its overlay subject
// either fails to decode or decodes to a report that encodes and decodes
// to itself; one that passes Check is within its bounds (endpoints that
// parse, peers that are node names).
func FuzzDecodeOverlayState(f *testing.F) {
	for _, seed := range []string{
		`{"node":"alpha","time":"2026-12-05T10:00:00Z","mode":"userspace","endpoints":["192.0.2.1:51820"],"relay":true,"peers":[{"node":"beta","handshake":"2026-12-05T09:59:00Z","via":"hub","endpoint":"198.51.100.2:51820"}]}`,
		`{"node":"a","mode":"kernel"}`,
		`{"node":"a","mode":"tap"}`,
		`{"node":"a","endpoints":["not an endpoint"]}`,
		`{"node":"a","peers":[{"node":"-x"}]}`,
		`{"node":"a","peers":[{"node":"b","via":"\u001b[2K"}]}`,
		`{"node":"a","error":"` + "\u202e" + `"}`,
		`{}`, `null`, `[`, ``, `{"node":"a"} {}`, `{"nodes":"a"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s spec.OverlayState
		if err := spec.Decode(data, &s); err != nil {
			return
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("decoded %q to %+v, which does not encode: %v", data, s, err)
		}
		var s2 spec.OverlayState
		if err := spec.Decode(again, &s2); err != nil || !reflect.DeepEqual(normal(s), normal(s2)) {
			t.Fatalf("%q decoded to %+v, encoded to %q, decoded again to %+v (%v)", data, s, again, s2, err)
		}
		if s.Check() != nil {
			return
		}
		for _, ep := range s.Endpoints {
			if _, err := netip.ParseAddrPort(ep); err != nil {
				t.Fatalf("Check passed endpoint %q: %v", ep, err)
			}
		}
		for _, p := range s.Peers {
			if spec.CheckName("node", p.Node) != nil || (p.Via != "" && spec.CheckName("node", p.Via) != nil) {
				t.Fatalf("Check passed peer %+v", p)
			}
		}
	})
}

// normal is s with its times as instants (a round trip keeps the instant,
// not the location) and its empty lists nil (omitempty leaves them out).
func normal(s spec.OverlayState) spec.OverlayState {
	s.Time = s.Time.UTC()
	var peers []spec.OverlayPath
	for _, p := range s.Peers {
		p.Handshake = p.Handshake.UTC()
		peers = append(peers, p)
	}
	s.Peers = peers
	if len(s.Endpoints) == 0 {
		s.Endpoints = nil
	}
	return s
}
