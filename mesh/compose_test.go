package mesh

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/rogpeppe/go-internal/txtar"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with what the code produces")

// TestComposeGolden runs every case in testdata/compose: the archive holds
// manifests (*.module.json), the nodes and their assignments (nodes.json),
// and the expected outcome per node (want.json), failures included.
// go test ./mesh -run TestComposeGolden -update rewrites want.json.
func TestComposeGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "compose", "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, modules, nodes, wantAt := readGolden(t, file)
			got := composeAll(nodes, modules)
			body, _ := json.MarshalIndent(got, "", "  ")
			body = append(body, '\n')
			if *update {
				if wantAt < 0 {
					ar.Files = append(ar.Files, txtar.File{Name: "want.json"})
					wantAt = len(ar.Files) - 1
				}
				ar.Files[wantAt].Data = body
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if wantAt < 0 {
				t.Fatal("no want.json: run with -update")
			}
			if want := ar.Files[wantAt].Data; string(want) != string(body) {
				t.Errorf("composition differs from want.json (rerun with -update if intended):\n--- got\n%s--- want\n%s", body, want)
			}
		})
	}
}

// readGolden reads one golden case: its archive, the modules its
// manifests resolve to, its nodes, and where its want.json is (-1: none).
func readGolden(t *testing.T, file string) (*txtar.Archive, map[string]spec.Module, []NodeInput, int) {
	t.Helper()
	ar, err := txtar.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	modules := map[string]spec.Module{}
	var nodes []NodeInput
	wantAt := -1
	for i, f := range ar.Files {
		switch {
		case strings.HasSuffix(f.Name, ".module.json"):
			man, err := spec.ParseManifest(f.Data)
			if err != nil {
				t.Fatalf("%s: %s: %v", file, f.Name, err)
			}
			mod, err := man.Resolve(func(string) (spec.Content, error) { return spec.Content{}, errors.New("no sources in golden cases") })
			if err != nil {
				t.Fatalf("%s: %s: %v", file, f.Name, err)
			}
			modules[mod.Name] = mod
		case f.Name == "nodes.json":
			if err := spec.Decode(f.Data, &nodes); err != nil {
				t.Fatalf("%s: nodes.json: %v", file, err)
			}
		case f.Name == "want.json":
			wantAt = i
		}
	}
	return ar, modules, nodes, wantAt
}

// goldenKinds are the kinds of the resources the golden cases compose.
func goldenKinds(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "compose", "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, file := range files {
		_, modules, nodes, _ := readGolden(t, file)
		for _, in := range nodes {
			plan, err := ComposeNode(in, modules)
			if err != nil {
				continue
			}
			for _, r := range plan.Resources {
				kinds[r.Kind] = true
			}
		}
	}
	return kinds
}

// missingGoldens are the kinds among names no golden case composes.
func missingGoldens(names []string, composed map[string]bool) []string {
	var out []string
	for _, name := range names {
		if !composed[name] {
			out = append(out, name)
		}
	}
	return out
}

// TestEveryKindHasAGoldenCase: a resource of every registered kind is
// composed by some case in testdata/compose; a kind that none composes
// trips the check.
func TestEveryKindHasAGoldenCase(t *testing.T) {
	t.Parallel()
	var names []string
	for _, k := range spec.Kinds() {
		names = append(names, k.Name)
	}
	composed := goldenKinds(t)
	if missing := missingGoldens(names, composed); len(missing) != 0 {
		t.Errorf("no golden case in testdata/compose composes a resource of kind %v: add one", missing)
	}
	if missing := missingGoldens(append(names, "dummy"), composed); len(missing) != 1 || missing[0] != "dummy" {
		t.Errorf("a kind no case composes is not found missing: %v", missing)
	}
}

// goldenOutcome is one node's outcome as the golden files hold it: file
// contents as text, so a reader sees what was filled in.
type goldenOutcome struct {
	Resources []goldenResource   `json:"resources,omitempty"`
	Routes    []spec.RosterRoute `json:"routes,omitempty"`
	Error     string             `json:"error,omitempty"`
	// Own says the failure is the node's own (ErrNodeOwn), and of which type.
	Own string `json:"own,omitempty"`
}

type goldenResource struct {
	Name      string              `json:"name"`
	Mode      string              `json:"mode,omitempty"`
	Owner     string              `json:"owner,omitempty"`
	Group     string              `json:"group,omitempty"`
	Content   string              `json:"content,omitempty"`
	Secret    bool                `json:"secret,omitempty"`
	OnRemove  string              `json:"on_remove,omitempty"`
	Network   *spec.NetworkSpec   `json:"network,omitempty"`
	Container *spec.ContainerSpec `json:"container,omitempty"`
	// SecretValues are a container's secrets' values by target, as
	// compose filled them in: the spec as it travels holds none.
	SecretValues map[string]string `json:"secret_values,omitempty"`
	Spec         spec.Spec         `json:"spec,omitempty"`
}

func composeAll(nodes []NodeInput, modules map[string]spec.Module) map[string]goldenOutcome {
	out := map[string]goldenOutcome{}
	for _, in := range nodes {
		plan, err := ComposeNode(in, modules)
		if err != nil {
			o := goldenOutcome{Error: err.Error()}
			var ce *ComposeError
			var se *SettingError
			switch {
			case errors.As(err, &ce):
				o.Own = "does not compose"
			case errors.As(err, &se):
				o.Own = "a setting reaches nothing"
			}
			if (o.Own != "") != errors.Is(err, ErrNodeOwn) {
				o.Own += " (but errors.Is(ErrNodeOwn) disagrees)"
			}
			out[in.Node] = o
			continue
		}
		o := goldenOutcome{Routes: plan.Routes}
		for _, r := range plan.Resources {
			g := goldenResource{Name: r.Name}
			switch s := r.Spec.(type) {
			case *spec.FileSpec:
				g.Mode, g.Owner, g.Group, g.Content, g.Secret = fmt.Sprintf("%04o", s.Mode), s.Owner, s.Group, string(s.Content), s.Secret
				if spec.ContentDigest(s.Content) != s.Digest || int64(len(s.Content)) != s.Size {
					g.Content += " (DIGEST OR SIZE DOES NOT MATCH THE CONTENT)"
				}
			case *spec.DirectorySpec:
				g.Mode, g.Owner, g.Group, g.OnRemove = fmt.Sprintf("%04o", s.Mode), s.Owner, s.Group, s.OnRemove
			case *spec.NetworkSpec:
				g.Network = s
			case *spec.ContainerSpec:
				g.Container = s
				for _, m := range s.Secrets {
					if g.SecretValues == nil {
						g.SecretValues = map[string]string{}
					}
					g.SecretValues[m.Target] = m.Value
				}
			default: // a kind spelled out no further: its spec as it travels
				g.Spec = r.Spec
			}
			if err := r.Check(); err != nil {
				g.Content += " (DOES NOT CHECK: " + err.Error() + ")"
			}
			o.Resources = append(o.Resources, g)
		}
		out[in.Node] = o
	}
	return out
}
