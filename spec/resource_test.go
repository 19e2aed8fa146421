package spec_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// pinned are resources of every kind with the exact bytes they travel as,
// written by the code before kinds were registered: a resource's Digest is
// the SHA-256 of these bytes, and hosts compare digests, so they must
// never drift.
var pinned = []struct {
	r      spec.Resource
	json   string
	digest string
}{
	{spec.Resource{Name: "m:file:/etc/motd", Kind: spec.KindFile, Module: "m", Spec: &spec.FileSpec{Path: "/etc/motd", Mode: 0o4755, Owner: "www-data", Group: "0",
		Content: []byte("hello <mesh> & \"you\"\n"), Size: 21, Digest: spec.ContentDigest([]byte("hello <mesh> & \"you\"\n"))}},
		`{"name":"m:file:/etc/motd","kind":"file","module":"m","file":{"path":"/etc/motd","mode":"4755","owner":"www-data","group":"0","content":"aGVsbG8gPG1lc2g+ICYgInlvdSIK","size":21,"digest":"sha256:a3c39f9ec9071e85f6e6976a18d7e1b29d9e39125b4577a558008a56b3802a18"}}`,
		"sha256:4874ef8258c596067ab7f320ad15c175531e989d61f574421f3aee6b4376e475"},
	{spec.Resource{Name: "m:file:/srv/big", Kind: spec.KindFile, Module: "m", Spec: &spec.FileSpec{Path: "/srv/big", Mode: 0o644, Blob: true, Size: 70000, Digest: spec.ContentDigest([]byte("big"))}},
		`{"name":"m:file:/srv/big","kind":"file","module":"m","file":{"path":"/srv/big","mode":"0644","blob":true,"size":70000,"digest":"sha256:2a21fe6d592a19b7de898b50eb53c429608de1a66f3e9f62da19714a770553d1"}}`,
		"sha256:dff00d48e953358ea3c7974c5b4597b02b8e634ebe21b01e950c592864a05234"},
	{spec.Resource{Name: "m:directory:/srv/www", Kind: spec.KindDirectory, Module: "m", Spec: &spec.DirectorySpec{Path: "/srv/www", Mode: 0o2750, Owner: "4242", OnRemove: spec.OnRemoveDelete}},
		`{"name":"m:directory:/srv/www","kind":"directory","module":"m","directory":{"path":"/srv/www","mode":"2750","owner":"4242","on_remove":"delete"}}`,
		"sha256:c26bdea3cd7c8cce75b57bcfcdaed52328505b532f3a066f85fabb81393aa5c1"},
	{spec.Resource{Name: "m:directory:/srv/<a>&b\u2028", Kind: spec.KindDirectory, Module: "m<&>", Spec: &spec.DirectorySpec{Path: "/srv/<a>&b\u2028", Mode: 0o755}},
		`{"name":"m:directory:/srv/\u003ca\u003e\u0026b\u2028","kind":"directory","module":"m\u003c\u0026\u003e","directory":{"path":"/srv/\u003ca\u003e\u0026b\u2028","mode":"0755"}}`,
		"sha256:6c3edf96604a0eb87f0067b3abf76375e9c636ebdf10dbc7ff3a1eb3a13c72b8"},
	{spec.NodeNetwork("alpha"),
		`{"name":"mesh:network:mesh-alpha","kind":"network","module":"mesh","network":{"name":"mesh-alpha"}}`,
		"sha256:e707a6656b23d9646fe42e3deb83e17fd1ff9b50e03a3ca7144fe0b2e9d0c57a"},
	{spec.Resource{Name: "ca-trust:trust:mesh", Kind: spec.KindTrust, Module: "ca-trust", Spec: &spec.TrustSpec{Name: "mesh"}},
		`{"name":"ca-trust:trust:mesh","kind":"trust","module":"ca-trust","trust":{"name":"mesh"}}`,
		"sha256:7156355d4036cad41a4bdaef3d94fab8d462b9815f93ee3fd13480a3b67e5be3"},
	{spec.Resource{Name: "web:certificate:/srv/web/tls", Kind: spec.KindCertificate, Module: "web", Spec: &spec.CertificateSpec{Name: "web.alpha.internal", Path: "/srv/web/tls"}},
		`{"name":"web:certificate:/srv/web/tls","kind":"certificate","module":"web","certificate":{"name":"web.alpha.internal","path":"/srv/web/tls"}}`,
		"sha256:b8c7a11aabd45f8f8ebd363e8c042c1b4c1c13897ae96c9b693a241ad3c98c64"},
	{spec.Resource{Name: "edge:edge:edge", Kind: spec.KindEdge, Module: "edge", Spec: &spec.EdgeSpec{Name: "edge", HTTP: ":80", HTTPS: ":443",
		ACMECA: spec.EdgeACMECA, Email: "ops@example.org", ACMERoots: "/etc/pebble/root.pem"}},
		`{"name":"edge:edge:edge","kind":"edge","module":"edge","edge":{"name":"edge","http":":80","https":":443","acme_ca":"https://acme-v02.api.letsencrypt.org/directory","email":"ops@example.org","acme_roots":"/etc/pebble/root.pem"}}`,
		"sha256:355ba6866b5e129b4cc6edd96dda984bb69ad7f15e69f6da2385a596e2d4f7bb"},
	{spec.Resource{Name: "m:container:web", Kind: spec.KindContainer, Module: "m", Spec: &spec.ContainerSpec{Name: "web", Image: "example/web:1",
		Archive: &spec.ImageArchive{Size: 1234, Digest: spec.ContentDigest([]byte("archive"))}, Command: []string{"/bin/httpd", "-f"},
		Env: map[string]string{"B": "2", "A": "<1>"}, Ports: []spec.PortSpec{{Container: 8080, Host: 80}, {Container: 53, Host: 53, Protocol: "udp"}},
		Mounts: []spec.MountSpec{{Source: "/srv/www", Target: "/www", ReadOnly: true}}, Restart: "always", Labels: map[string]string{"team": "web"}}},
		`{"name":"m:container:web","kind":"container","module":"m","container":{"name":"web","image":"example/web:1","archive":{"size":1234,"digest":"sha256:0eb3e36bfb24dcd9bb1d1bece1531216b59539a8fde17ee80224af0653c92aa3"},"command":["/bin/httpd","-f"],"env":{"A":"\u003c1\u003e","B":"2"},"ports":[{"container":8080,"host":80},{"container":53,"host":53,"protocol":"udp"}],"mounts":[{"source":"/srv/www","target":"/www","read_only":true}],"restart":"always","labels":{"team":"web"}}}`,
		"sha256:2b71cd5f961d49bd4b2d0fed7d51cf4aac5afdc41827bb64a4c2ff9c1f10e31b"},
	{spec.NodeBinary(spec.Release{Digest: "0b1e8f3a0c9d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f", Size: 31457280, GOOS: "linux", GOARCH: "amd64"}, 0),
		`{"name":"mesh:binary:binary","kind":"binary","module":"mesh","binary":{"digest":"0b1e8f3a0c9d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f","size":31457280,"goos":"linux","goarch":"amd64"}}`,
		"sha256:1811cd9abd5ad5d7965b4c25d6247b03fb7b3519496ce09413e604b457f7d430"},
}

// TestResourceBytesArePinned: a resource of each kind encodes to exactly the bytes
// it always did, inside a declaration too, its digest is theirs, and they
// decode to it again.
func TestResourceBytesArePinned(t *testing.T) {
	t.Parallel()
	kinds := map[string]bool{}
	for _, p := range pinned {
		kinds[p.r.Kind] = true
		got, err := json.Marshal(p.r)
		if err != nil {
			t.Fatalf("%s: %v", p.r.Name, err)
		}
		if string(got) != p.json {
			t.Errorf("%s encodes to\n%s\nwant\n%s", p.r.Name, got, p.json)
		}
		if d := p.r.Digest(); d != p.digest || d != spec.ContentDigest([]byte(p.json)) {
			t.Errorf("%s: digest %s, want %s", p.r.Name, d, p.digest)
		}
		decl, err := json.Marshal(spec.Declaration{Resources: []spec.Resource{p.r}})
		if err != nil || !bytes.Contains(decl, []byte(`"resources":[`+p.json+`]`)) {
			t.Errorf("%s in a declaration: %s (%v)", p.r.Name, decl, err)
		}
		var back spec.Resource
		if err := spec.Decode([]byte(p.json), &back); err != nil {
			t.Fatalf("%s does not decode: %v", p.r.Name, err)
		}
		if again, _ := json.Marshal(back); string(again) != p.json {
			t.Errorf("%s decodes to what encodes as\n%s", p.r.Name, again)
		}
	}
	for _, k := range spec.Kinds() {
		if !kinds[k.Name] {
			t.Errorf("kind %s has no pinned resource: add one, its bytes written by the code as it is", k.Name)
		}
	}
}

// TestResourceDecodeRefuses: a resource whose kind is unknown, that lacks
// its kind's spec, carries another kind's, or holds an unknown field (in
// its spec too) is refused, naming what is wrong.
func TestResourceDecodeRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, want string }{
		{"unknown kind", `{"name":"x","kind":"socket","module":"m"}`, `unknown kind "socket"`},
		{"unknown kind with a known spec", `{"name":"x","kind":"socket","module":"m","file":{"path":"/x"}}`, `unknown kind "socket"`},
		{"no kind", `{"name":"x","module":"m","directory":{"path":"/x","mode":"0755"}}`, `unknown kind ""`},
		{"no spec", `{"name":"x","kind":"file","module":"m"}`, "kind file has no file spec"},
		{"a null spec", `{"name":"x","kind":"file","module":"m","file":null}`, "kind file has no file spec"},
		{"another kind's spec", `{"name":"x","kind":"file","module":"m","directory":{"path":"/x","mode":"0755"}}`, "kind file carries a directory spec"},
		{"two specs", `{"name":"x","kind":"file","module":"m","directory":{"path":"/x","mode":"0755"},"file":{"path":"/x","mode":"0644"}}`, "both a directory and a file spec"},
		{"an unknown field", `{"name":"x","kind":"network","module":"m","network":{"name":"mesh-a"},"extra":1}`, `unknown field "extra"`},
		{"an unknown field in the spec", `{"name":"x","kind":"network","module":"m","network":{"name":"mesh-a","subnet":"10.0.0.0/8"}}`, `unknown field "subnet"`},
		{"a bad mode", `{"name":"x","kind":"directory","module":"m","directory":{"path":"/x","mode":"9"}}`, `mode "9" is not an octal mode`},
		{"not an object", `["x"]`, "a resource is a JSON object"},
	} {
		var r spec.Resource
		err := spec.Decode([]byte(tc.body), &r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// Keys are matched as encoding/json matches a struct's: case aside.
	var r spec.Resource
	if err := spec.Decode([]byte(`{"Name":"x","KIND":"network","module":"m","Network":{"Name":"mesh-a"}}`), &r); err != nil || r.Target() != "mesh-a" || r.Name != "x" {
		t.Errorf("keys in another case: %+v, %v", r, err)
	}
}

// TestResourceCheck: a resource built by hand whose spec is not its kind's,
// or of a kind nobody registered, fails Check saying so.
func TestResourceCheck(t *testing.T) {
	t.Parallel()
	dir := &spec.DirectorySpec{Path: "/x", Mode: 0o755}
	for _, tc := range []struct {
		r    spec.Resource
		want string
	}{
		{spec.Resource{Name: "x", Kind: "socket", Spec: dir}, `unknown kind "socket"`},
		{spec.Resource{Name: "x", Kind: spec.KindFile, Spec: dir}, "kind file needs exactly a file spec"},
		{spec.Resource{Name: "x", Kind: spec.KindFile}, "kind file needs exactly a file spec"},
		{spec.Resource{Kind: spec.KindDirectory, Spec: dir}, "a directory resource has no name"},
		{spec.Resource{Name: "x", Kind: spec.KindDirectory, Spec: &spec.DirectorySpec{Path: "x"}}, `resource "x": path "x" is not absolute`},
	} {
		if err := tc.r.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
}

// resourceSeeds are FuzzDecodeResource's seeds: at least one of every
// kind (TestEveryKindIsComplete holds it so).
var resourceSeeds = []string{
	`{"name":"m:file:/a","kind":"file","module":"m","file":{"path":"/a","mode":"0644","content":"aGk=","size":2,"digest":"sha256:8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4"}}`,
	`{"name":"m:file:/b","kind":"file","module":"m","file":{"path":"/b","mode":"0600","blob":true,"size":70000,"digest":"sha256:2a21fe6d592a19b7de898b50eb53c429608de1a66f3e9f62da19714a770553d1"}}`,
	`{"name":"m:directory:/d","kind":"directory","module":"m","directory":{"path":"/d","mode":"2750","owner":"4242","on_remove":"delete"}}`,
	`{"name":"mesh:network:mesh-alpha","kind":"network","module":"mesh","network":{"name":"mesh-alpha"}}`,
	`{"name":"ca-trust:trust:mesh","kind":"trust","module":"ca-trust","trust":{"name":"mesh"}}`,
	`{"name":"web:certificate:/srv/web/tls","kind":"certificate","module":"web","certificate":{"name":"web.alpha.internal","path":"/srv/web/tls"}}`,
	`{"name":"edge:edge:edge","kind":"edge","module":"edge","edge":{"name":"edge","http":":80","https":":443","acme_ca":"https://acme-v02.api.letsencrypt.org/directory","email":"ops@example.org","acme_roots":"/etc/pebble/root.pem"}}`,
	`{"name":"x","kind":"edge","module":"m","edge":{"name":"e","http":"80","https":":80","acme_ca":"http://ca"}}`,
	`{"name":"x","kind":"certificate","module":"m","certificate":{"name":"*.alpha.internal","path":"/srv/../tls"}}`,
	`{"name":"m:container:web","kind":"container","module":"m","container":{"name":"web","image":"w:1","archive":{"size":3,"digest":"sha256:0eb3e36bfb24dcd9bb1d1bece1531216b59539a8fde17ee80224af0653c92aa3"},"command":["a"],"env":{"A":"1"},"ports":[{"container":80,"host":8080,"protocol":"udp"}],"mounts":[{"source":"/s","target":"/t","read_only":true}],"restart":"always","labels":{"k":"v"}}}`,
	`{"name":"mesh:binary:binary","kind":"binary","module":"mesh","binary":{"digest":"0b1e8f3a0c9d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f","size":31457280,"goos":"linux","goarch":"amd64"}}`,
	`{"name":"x","kind":"binary","module":"mesh","binary":{"digest":"0B1E","size":0,"goos":"Linux","goarch":"x86_64"}}`,
	`{"name":"x","kind":"file","module":"m","directory":{"path":"/x","mode":"0755"}}`,
	`{"name":"x","kind":"file","module":"m","file":null,"directory":null}`,
	`{"NAME":"x","Kind":"directory","Module":"m","DIRECTORY":{"Path":"/x","Mode":"0755"}}`,
	`{"name":"x","kind":"network","module":"m","network":{"name":"mesh-a"},"network":{"name":"mesh-b"}}`,
	`null`,
	`{}`,
	`[]`,
}

// FuzzDecodeResource: decoding a resource never panics, and what decodes
// encodes to bytes that decode to the same resource (the same bytes, the
// same digest) and is checked without a panic.
func FuzzDecodeResource(f *testing.F) {
	for _, s := range resourceSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r spec.Resource
		err := spec.Decode(data, &r)
		var decl spec.Declaration
		if json.Valid(data) { // one value: the declaration and the list hold one resource
			declErr := spec.Decode([]byte(`{"resources":[`+string(data)+`]}`), &decl)
			if (err == nil) != (declErr == nil) || err == nil && decl.Resources[0].Digest() != r.Digest() {
				t.Fatalf("%q decodes alone (%v) and in a declaration (%v, %+v) apart", data, err, declErr, decl.Resources)
			}
			var list spec.Resources
			listErr := spec.Decode([]byte(`[`+string(data)+`]`), &list)
			if (err == nil) != (listErr == nil) || err == nil && list[0].Digest() != r.Digest() {
				t.Fatalf("%q decodes alone (%v) and in a list (%v, %+v) apart", data, err, listErr, list)
			}
		}
		if err != nil {
			return
		}
		_ = r.Check()
		if r.Spec != nil && r.Spec.Kind() != r.Kind {
			t.Fatalf("decoded %q to kind %s with a %s spec", data, r.Kind, r.Spec.Kind())
		}
		once, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("decoded %q to %+v, which does not encode: %v", data, r, err)
		}
		var again spec.Resource
		if err := spec.Decode(once, &again); err != nil {
			t.Fatalf("decoded %q, re-encoded %s, which does not decode: %v", data, once, err)
		}
		if twice, _ := json.Marshal(again); !bytes.Equal(once, twice) || r.Digest() != again.Digest() || r.Digest() != spec.ContentDigest(once) {
			t.Fatalf("decoded %q, re-encoded %s, which decodes to what encodes as %s", data, once, twice)
		}
		if err := spec.Decode([]byte(`{"resources":[`+string(once)+`]}`), &decl); err != nil || len(decl.Resources) != 1 || decl.Resources[0].Digest() != r.Digest() {
			t.Fatalf("%s in a declaration: %+v, %v", once, decl.Resources, err)
		}
	})
}

// TestRows: mesh module show lists each kind as it did before kinds were
// registered: target, mode, owner and content.
func TestRows(t *testing.T) {
	t.Parallel()
	want := map[string]spec.Row{
		"m:file:/etc/motd":        {"/etc/motd", "4755", "www-data:0", "21 bytes sha256:a3c39f9ec907"},
		"m:file:/srv/big":         {"/srv/big", "0644", "-", "70000 bytes sha256:2a21fe6d592a (blob)"},
		"m:directory:/srv/www":    {"/srv/www", "2750", "4242:-", "on_remove delete: removed with its contents"},
		"mesh:network:mesh-alpha": {"mesh-alpha", "-", "-", "-"},
		"m:container:web":         {"web", "-", "-", "example/web:1 (archive 1234 bytes sha256:0eb3e36bfb24)"},
		"mesh:binary:binary":      {"binary", "-", "-", "linux/amd64 31457280 bytes 0b1e8f3a0c9d"},
	}
	for _, p := range pinned {
		if w, ok := want[p.r.Name]; ok && p.r.Spec.Row() != w {
			t.Errorf("%s: row %+v, want %+v", p.r.Name, p.r.Spec.Row(), w)
		}
	}
}

// TestBinaryCheck: a binary's digest is 64 lower-case hex digits, its size
// 1 to MaxRelease, its target Go's names; each refusal names the field.
func TestBinaryCheck(t *testing.T) {
	t.Parallel()
	good := spec.BinarySpec{Digest: strings.Repeat("ab", 32), Size: 10, GOOS: "linux", GOARCH: "arm64"}
	if err := good.Check(); err != nil {
		t.Fatalf("a good binary: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*spec.BinarySpec)
		want string
	}{
		{"upper-case digest", func(b *spec.BinarySpec) { b.Digest = strings.Repeat("AB", 32) }, "lower-case hex"},
		{"prefixed digest", func(b *spec.BinarySpec) { b.Digest = "sha256:" + strings.Repeat("ab", 32) }, "64 hex digits"},
		{"empty", func(b *spec.BinarySpec) { b.Size = 0 }, "size 0"},
		{"over the cap", func(b *spec.BinarySpec) { b.Size = spec.MaxRelease + 1 }, "is not 1 to"},
		{"uname machine", func(b *spec.BinarySpec) { b.GOARCH = "x86_64" }, `goarch "x86_64"`},
		{"no goos", func(b *spec.BinarySpec) { b.GOOS = "" }, `goos ""`},
	} {
		b := good
		tc.edit(&b)
		if err := b.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if got := good.Blobs(); len(got) != 1 || got[0].Digest != "sha256:"+good.Digest || got[0].Size != 10 {
		t.Errorf("blobs %+v, want the release's blob", got)
	}
}

// TestBinaryFits: a node's reported architecture is read as GOARCH (uname's
// x86_64 and aarch64 too), and a release fits only its own.
func TestBinaryFits(t *testing.T) {
	t.Parallel()
	amd := spec.Release{GOOS: "linux", GOARCH: "amd64"}
	arm := spec.Release{GOOS: "linux", GOARCH: "arm64"}
	for _, tc := range []struct {
		r        spec.Release
		arch, os string
		want     string
	}{
		{amd, "amd64", "linux", ""},
		{amd, "x86_64", "linux", ""},
		{amd, "X86_64", "", ""},
		{arm, "aarch64", "linux", ""},
		{arm, "arm64", "linux", ""},
		{arm, "amd64", "linux", "arch arm64 release, node is amd64"},
		{arm, "x86_64", "linux", "arch arm64 release, node is amd64"},
		{amd, "aarch64", "linux", "arch amd64 release, node is arm64"},
		{amd, "i686", "linux", "arch amd64 release, node is 386"},
		{amd, "amd64", "darwin", "os linux release, node is darwin"},
		{amd, "", "linux", "the node has reported no architecture yet (its facts)"},
	} {
		if got := spec.BinaryFits(tc.r, tc.arch, tc.os, []string{spec.CapBinaries}); got != tc.want {
			t.Errorf("%s release on %s/%s: %q, want %q", tc.r.GOARCH, tc.os, tc.arch, got, tc.want)
		}
	}
	if got := spec.BinaryFits(amd, "amd64", "linux", []string{spec.CapContainers}); !strings.Contains(got, `does not report the "binaries" capability`) {
		t.Errorf("a host without the capability: %q", got)
	}
}
