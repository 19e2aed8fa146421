package host

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
)

// FuzzVerify: whatever the bytes, verify never panics; what it accepts is
// signed by the key, decodes strictly, is for this node and mesh, and is
// above the kept sequence.
func FuzzVerify(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	good, _ := json.Marshal(spec.Declaration{Mesh: "m", Node: "alpha", Seq: 2, Issued: now, Expires: now.Add(time.Hour), Protocol: 1,
		Resources: []spec.Resource{{Name: "x", Kind: spec.KindDirectory, Module: "x", Spec: &spec.DirectorySpec{Path: "/x", Mode: 0o755}}}})
	f.Add(good, true)
	f.Add([]byte(`{"mesh":"m","node":"alpha","seq":3}`), true)
	f.Add([]byte(`{}`), false)
	withContainer, _ := json.Marshal(spec.Declaration{Mesh: "m", Node: "alpha", Seq: 2, Issued: now, Expires: now.Add(time.Hour), Protocol: 1,
		Resources: []spec.Resource{{Name: "mesh:network:mesh-alpha", Kind: spec.KindNetwork, Module: "mesh", Spec: &spec.NetworkSpec{Name: "mesh-alpha"}},
			{Name: "w:container:web", Kind: spec.KindContainer, Module: "w", Spec: &spec.ContainerSpec{Name: "web", Image: "w:1",
				Archive: &spec.ImageArchive{Size: 10, Digest: spec.ContentDigest([]byte("0123456789"))}, Env: map[string]string{"A": "b"},
				Ports: []spec.PortSpec{{Container: 80, Host: 8080}}, Mounts: []spec.MountSpec{{Source: "/srv", Target: "/www", ReadOnly: true}}}}}})
	f.Add(withContainer, true)
	f.Add([]byte(`{"mesh":"m","node":"alpha","seq":3,"resources":[{"file":{"mode":"0999"}}]}`), true)
	auth, err := ca.Create(f.TempDir(), "m", now, "internal")
	if err != nil {
		f.Fatal(err)
	}
	withChain, _ := json.Marshal(spec.Declaration{Mesh: "m", Node: "alpha", Seq: 2, Issued: now, Expires: now.Add(time.Hour), Protocol: 1,
		CAChain: string(auth.IntermediatePEM())})
	f.Add(withChain, true)
	k := kept{mesh: "m", node: "alpha", key: pub, seq: 1, root: auth.Root()}
	f.Fuzz(func(t *testing.T, raw []byte, sign bool) {
		sig := base64.StdEncoding.EncodeToString(make([]byte, ed25519.SignatureSize))
		if sign {
			sig = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, raw))
		}
		decl, v, reason := verify(raw, sig, k, now)
		switch v {
		case accept:
			if !sign || decl.Node != "alpha" || decl.Mesh != "m" || decl.Seq <= 1 || reason != "" {
				t.Fatalf("accepted %+v (signed %v)", decl, sign)
			}
			var again spec.Declaration
			if err := spec.Decode(raw, &again); err != nil {
				t.Fatalf("accepted bytes that do not decode strictly: %v", err)
			}
			if again.CAChain != "" {
				if _, err := ca.ParseChain([]byte(again.CAChain), auth.Root(), now); err != nil {
					t.Fatalf("accepted a chain that does not verify against the root: %v", err)
				}
			}
		case refuse:
			if reason == "" {
				t.Fatal("refused without a reason")
			}
		case duplicate:
			t.Fatal("a duplicate of nothing kept")
		}
	})
}

// FuzzVerifyRoster: whatever the bytes, verifyRoster never panics; what it
// accepts is signed by the key, decodes strictly, is for this mesh, above
// the kept roster sequence and unexpired.
func FuzzVerifyRoster(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	good, _ := json.Marshal(spec.RosterDoc{Mesh: "m", Seq: 4, Issued: now, Expires: now.Add(time.Hour), Protocol: spec.Protocol,
		Names: spec.Roster{Nodes: []spec.RosterNode{{Name: "alpha", Address: "10.0.0.1"}},
			Routes: []spec.RosterRoute{{Name: "web.alpha.internal", Node: "alpha", Address: "10.0.0.1", Port: 80, Module: "web"}}}})
	f.Add(good, true)
	f.Add([]byte(`{"mesh":"m","roster_seq":3}`), true)
	f.Add([]byte(`{"mesh":"m","roster_seq":2,"expires":"2026-01-01T01:00:00Z"}`), true)
	f.Add([]byte(`{"mesh":"m","node":"alpha","seq":3}`), true)
	f.Add([]byte(`{}`), false)
	k := keptRoster{mesh: "m", seq: 2}
	f.Fuzz(func(t *testing.T, raw []byte, sign bool) {
		sig := make([]byte, ed25519.SignatureSize)
		if sign {
			sig = ed25519.Sign(priv, raw)
		}
		doc, v, reason := verifyRoster(raw, sig, pub, k, now)
		switch v {
		case accept:
			if !sign || doc.Mesh != "m" || doc.Seq <= 2 || reason != "" || now.After(doc.Expires.Add(spec.ClockSkew)) {
				t.Fatalf("accepted %+v (signed %v)", doc, sign)
			}
			var again spec.RosterDoc
			if err := spec.Decode(raw, &again); err != nil {
				t.Fatalf("accepted bytes that do not decode strictly: %v", err)
			}
		case refuse:
			if reason == "" {
				t.Fatal("refused without a reason")
			}
		case duplicate:
			t.Fatal("a duplicate of nothing kept")
		}
	})
}
