package spec_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// manifestSeeds are FuzzParseManifest's seeds: at least one that parses
// for every kind module.json may declare (TestEveryKindIsComplete holds it so).
var manifestSeeds = []string{
	`{"name":"motd","version":"1","resources":[{"file":{"path":"/etc/motd","content":"hi\n","mode":"0644"}}]}`,
	`{"name":"w","version":"1","resources":[{"directory":{"path":"/srv/www"}},{"file":{"path":"/srv/www/i","source":"i.html"}}]}`,
	`{"name":"x","version":"1","resources":[{"file":{"path":"/a","source":"../etc/passwd"}}]}`,
	`{"name":"x","version":"1","resources":[{"file":{"path":"/a/../b","content":""}}]}`,
	`{"name":"h","version":"1","settings":[{"name":"port","type":"int","default":"80"},{"name":"t","type":"string","secret":true,"required":true}],"routes":[{"name":"web","port":80,"public":["hello.${t}"]}],"resources":[{"file":{"path":"/srv/${node}/x","content":"${port} $${HOME}"}}]}`,
	`{"name":"h","version":"1","settings":[{"name":"l","type":"list","default":"a,b"}],"routes":[{"name":"a","port":1},{"name":"a","port":2}],"resources":[]}`,
	`{"name":"h","version":"1","settings":[{"name":"b","type":"bool","default":"maybe"}],"resources":[]}`,
	`{"name":"c","version":"1","settings":[{"name":"dir","type":"string","default":"/srv"}],"resources":[{"container":{"name":"web","image":"r/${dir}:1","archive":"web.tar","command":["/bin/sh","-c","$${HOME}"],"env":{"A":"${dir}"},"ports":[{"container":80,"host":8080,"protocol":"udp"}],"mounts":[{"source":"${dir}/www","target":"/www","read_only":true}],"restart":"always","labels":{"k":"${node}"}}}]}`,
	`{"name":"c","version":"1","resources":[{"container":{"name":"web","image":"x","ports":[{"container":80,"host":80},{"container":81,"host":80}]}},{"container":{"name":"web","image":"y"}}]}`,
	`{"name":"c","version":"1","settings":[{"name":"dir","type":"string","default":"/srv"}],"resources":[{"directory":{"path":"/srv/${node}/www","on_remove":"delete"}},{"container":{"name":"web","image":"r/w:${node}","archive":"web.tar","command":["/bin/sh","-c","$${HOME}"],"env":{"A":"${dir}"},"ports":[{"container":80,"host":8080,"protocol":"udp"}],"mounts":[{"source":"/srv/${dir}","target":"/www","read_only":true}],"restart":"always","labels":{"k":"${node}"}}}]}`,
	`{"name":"x","version":"1","resources":[{"file":{"path":"/a","content":"x","size":1}}]}`,
	`{"name":"x","version":"1","resources":[{"file":{"path":"/a","content":"x"},"directory":{"path":"/b"}}]}`,
	`{"name":"x","version":"1","resources":[{"network":{"name":"mesh-a"}}]}`,
	`{"name":"ca-trust","version":"1","resources":[{"trust":{"name":"mesh"}}]}`,
	`{"name":"x","version":"1","settings":[{"name":"n","type":"string","default":"a"}],"resources":[{"trust":{"name":"${n}","extra":1}}]}`,
	`{"name":"web","version":"1","routes":[{"name":"web","port":443}],"resources":[{"certificate":{"name":"web.${node}.internal","path":"/srv/web/tls"}},{"directory":{"path":"/srv/web"}}]}`,
	`{"name":"web","version":"1","resources":[{"certificate":{"name":"web.${node}.internal","path":"/srv/web/tls"}},{"directory":{"path":"/srv/web/tls"}}]}`,
	`{"name":"edge","version":"1","settings":[{"name":"ca","type":"string","default":"https://ca.example.org/dir"}],"resources":[{"edge":{"name":"edge","acme_ca":"${ca}","email":"ops@example.org"}}]}`,
	`{"name":"edge","version":"1","resources":[{"edge":{"name":"edge","http":":443","https":":443","acme_ca":"http://ca"}}]}`,
	`{"name":"files","version":"1","routes":[{"name":"files","port":2049}],"provides":[{"grant":"files","route":"files","file":{"path":"/srv/store/users","line":"${consumer}:${credential}","mode":"0600"}}],"resources":[]}`,
	`{"name":"app","version":"1","settings":[{"name":"u","type":"string"},{"name":"p","type":"string","secret":true},{"name":"a","type":"string"}],"consumes":[{"grant":"files","user":"u","password":"p","address":"a"}],"resources":[{"file":{"path":"/etc/app","content":"${u}:${p}@${a}"}}]}`,
	`{"name":"app","version":"1","settings":[{"name":"p","type":"string"}],"consumes":[{"grant":"files","password":"p"}],"resources":[]}`,
}

// gaps are what kind k lacks to be complete: a zero spec that Check
// refuses, its section in docs/modules.md (a "### KIND" heading), a
// FuzzDecodeResource seed of it that decodes, and, if module.json may
// declare it, a FuzzParseManifest seed with it that parses.
func gaps(k spec.Kind, docs string, decoded, parsed map[string]bool) []string {
	var out []string
	if err := k.New().Check(); err == nil {
		out = append(out, "a zero spec passes Check: the kind validates nothing")
	}
	if !regexp.MustCompile(`(?m)^### ` + regexp.QuoteMeta(k.Name) + `\s*$`).MatchString(docs) {
		out = append(out, "docs/modules.md has no section ### "+k.Name)
	}
	if !decoded[k.Name] {
		out = append(out, "no seed of FuzzDecodeResource (resourceSeeds) decodes to a resource of it")
	}
	if k.Manifest != nil && !parsed[k.Name] {
		out = append(out, "no seed of FuzzParseManifest (manifestSeeds) that parses declares it")
	}
	return out
}

// seededKinds are the kinds the fuzz seeds that decode or parse hold.
func seededKinds() (decoded, parsed map[string]bool) {
	decoded, parsed = map[string]bool{}, map[string]bool{}
	for _, s := range resourceSeeds {
		var r spec.Resource
		if spec.Decode([]byte(s), &r) == nil {
			decoded[r.Kind] = true
		}
	}
	for _, s := range manifestSeeds {
		if m, err := spec.ParseManifest([]byte(s)); err == nil {
			for _, r := range m.Resources {
				parsed[r.Kind] = true
			}
		}
	}
	return decoded, parsed
}

// TestEveryKindIsComplete: every registered kind validates, is documented and
// is fuzzed (the host's appliers and the compose goldens are held so by
// the host's and mesh's tests); a kind lacking each trips each.
func TestEveryKindIsComplete(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("../docs/modules.md")
	if err != nil {
		t.Fatal(err)
	}
	docs := string(body)
	decoded, parsed := seededKinds()
	var names []string
	for _, k := range spec.Kinds() {
		names = append(names, k.Name)
		for _, g := range gaps(k, docs, decoded, parsed) {
			t.Errorf("kind %s: %s", k.Name, g)
		}
	}
	for _, want := range []string{spec.KindContainer, spec.KindDirectory, spec.KindFile, spec.KindNetwork} {
		if !slices.Contains(names, want) {
			t.Errorf("kind %s is not registered (kinds: %v)", want, names)
		}
	}

	// A kind with none of it trips every check.
	dummy := spec.Kind{Name: "dummy", New: func() spec.Spec { return &dummySpec{} },
		Manifest: func([]byte) (spec.Declared, error) { return nil, nil }}
	got := gaps(dummy, docs, decoded, parsed)
	for _, want := range []string{"passes Check", "### dummy", "FuzzDecodeResource", "FuzzParseManifest"} {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, want) }) {
			t.Errorf("a kind with nothing: gaps %q, want one naming %s", got, want)
		}
	}
	// Controller-only kinds need no manifest seed.
	dummy.Manifest = nil
	if got := gaps(dummy, docs, decoded, parsed); len(got) != 3 {
		t.Errorf("a controller-only kind with nothing: gaps %q, want 3", got)
	}
}

// dummySpec is a kind's spec that checks nothing.
type dummySpec struct{}

func (*dummySpec) Kind() string   { return "dummy" }
func (*dummySpec) Target() string { return "" }
func (*dummySpec) Check() error   { return nil }
func (d *dummySpec) Fill(func(field, s string) (string, error)) (spec.Spec, error) {
	return d, nil
}
func (*dummySpec) Blobs() []spec.Blob { return nil }
func (*dummySpec) Row() spec.Row      { return spec.Row{} }
