package spec_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// FuzzDecodeRosterDoc: a roster message decodes strictly (unknown fields,
// trailing data refused); what decodes encodes and decodes again to the
// same message; a numbered roster message's bytes never decode as a
// declaration (its sequence is roster_seq, which a declaration refuses).
func FuzzDecodeRosterDoc(f *testing.F) {
	for _, seed := range []string{
		`{"mesh":"m","roster_seq":3,"issued":"2026-05-01T10:00:00Z","expires":"2026-05-02T10:00:00Z","protocol":3,"names":{"nodes":[{"name":"alpha","address":"10.0.0.1"}],"routes":[{"name":"web.alpha.internal","node":"alpha","address":"10.0.0.1","port":80,"module":"web"},{"name":"www.example.org","node":"alpha","address":"10.0.0.1","port":443,"module":"web","public":true}]}}`,
		`{"mesh":"m","roster_seq":1,"names":{"nodes":[],"routes":[]}}`,
		`{"mesh":"m","roster_seq":2,"names":{"nodes":[],"routes":[],"controllers":["nats://192.0.2.1:4222","tls://192.0.2.2:4222"]}}`,
		`{"mesh":"m","roster_seq":2,"names":{"nodes":[],"routes":[],"controllers":[1]}}`,
		`{"mesh":"m","roster_seq":1,"names":{"nodes":null,"routes":null}}`,
		`{"mesh":"m","node":"alpha","seq":2,"roster":{"nodes":[],"routes":[]}}`,
		`{"mesh":"m","roster_seq":-1}`,
		`{"mesh":"m","roster_seq":1,"names":{"nodes":[{"name":1}]}}`,
		`{"roster_seq":1} {}`,
		`{}`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var doc spec.RosterDoc
		if err := spec.Decode(data, &doc); err != nil {
			return
		}
		var decl spec.Declaration
		if doc.Seq != 0 && spec.Decode(data, &decl) == nil {
			t.Fatalf("%q decodes as a numbered roster message and as a declaration", data)
		}
		again, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("decoded %q to %+v, which does not encode: %v", data, doc, err)
		}
		var doc2 spec.RosterDoc
		if err := spec.Decode(again, &doc2); err != nil {
			t.Fatalf("decoded %q, re-encoded %s, which does not decode: %v", data, again, err)
		}
		if !doc.Issued.Equal(doc2.Issued) || !doc.Expires.Equal(doc2.Expires) {
			t.Fatalf("times changed: %s", again)
		}
		doc.Issued, doc.Expires = doc2.Issued, doc2.Expires
		if !reflect.DeepEqual(doc, doc2) {
			t.Fatalf("decoded %q to %+v; re-encoded %s decodes to %+v", data, doc, again, doc2)
		}
	})
}

// TestRosterReplyKeepsTheSignedBytes: a roster at the cap, answered in a
// reply, fits a bus message and reaches the host byte for byte as signed
// (names that encoding/json escapes included).
func TestRosterReplyKeepsTheSignedBytes(t *testing.T) {
	doc := spec.RosterDoc{Mesh: "m", Seq: 1, Issued: time.Now(), Expires: time.Now().Add(time.Hour), Protocol: spec.Protocol}
	doc.Names.Routes = []spec.RosterRoute{{Name: "<a&b>\u2028é.example", Node: "alpha", Address: "10.0.0.1", Port: 80, Module: "m"}}
	// Nodes of the same encoded size, as many as fit under the cap.
	node := func(i int) spec.RosterNode {
		return spec.RosterNode{Name: fmt.Sprintf("node%06d-%s", i, strings.Repeat("x", 40)), Address: "10.0.0.1"}
	}
	empty, _ := json.Marshal(doc)
	one, _ := json.Marshal(node(0))
	for i := range (spec.MaxRoster - len(empty) - 200) / (len(one) + 1) {
		doc.Names.Nodes = append(doc.Names.Nodes, node(i))
	}
	body, _ := json.Marshal(doc)
	if len(body) > spec.MaxRoster || len(body) < spec.MaxRoster-4096 {
		t.Fatalf("the roster is %d bytes, want just under %d", len(body), spec.MaxRoster)
	}
	sig := make([]byte, 64)
	wire := spec.EncodeReply(spec.RosterReply{Body: body, Sig: sig}, nil)
	if len(wire) > spec.MaxPayload-4096 {
		t.Fatalf("a reply carrying a roster of %d bytes is %d bytes, over the bus's %d", len(body), len(wire), spec.MaxPayload)
	}
	var got spec.RosterReply
	if err := spec.DecodeReply(wire, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Body, body) {
		t.Fatal("the roster's bytes changed on the way")
	}
}

// TestGunzipBounded: a gzipped body comes back as it was; past the limit
// (a bomb) or malformed, it is refused.
func TestGunzipBounded(t *testing.T) {
	body := bytes.Repeat([]byte(`{"name":"n00001","address":"10.0.0.1"},`), 1000)
	z := spec.Gzip(body)
	if len(z) >= len(body)/5 {
		t.Fatalf("gzipped %d bytes to %d: not a fifth", len(body), len(z))
	}
	got, err := spec.Gunzip(z, len(body))
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("gunzipped %d bytes, %v; want the %d bytes gzipped", len(got), err, len(body))
	}
	if _, err := spec.Gunzip(z, len(body)-1); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a body past the limit: %v, want refused", err)
	}
	if _, err := spec.Gunzip(body, len(body)); err == nil {
		t.Fatal("a body not gzipped was taken")
	}
}
