package ca_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
)

// TestAdoptTakesAnotherControllersIntermediate: a copy of a CA (another
// controller's, as handed at its join) adopts the intermediate the first
// prepared afterwards: it signs under it, Load reads it back, and the one
// it replaced is kept. An intermediate of another root, a key that is not
// its own, and a key that is no key are refused, changing nothing.
func TestAdoptTakesAnotherControllersIntermediate(t *testing.T) {
	t.Parallel()
	a, dir := newConstrained(t)
	copyDir := filepath.Join(t.TempDir(), "ca")
	if out, err := exec.Command("cp", "-a", dir, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("copy the CA: %v: %s", err, out)
	}
	b, err := ca.Load(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	was := b.Intermediate()
	p, err := a.Prepare(append(meshDomains, "example.org"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	other, _ := newConstrained(t)
	q, err := other.Prepare(meshDomains, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p2, err := a.Prepare(meshDomains, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Discard()
	for _, bad := range []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"another root's", q.CertPEM(), q.KeyPEM(), "not signed by this mesh's root"},
		{"a key not its own", p.CertPEM(), p2.KeyPEM(), "the key is not its"},
		{"no key", p.CertPEM(), []byte("key"), "no PEM block"},
	} {
		if err := b.Adopt(bad.cert, bad.key); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("adopt %s: %v, want %q", bad.name, err, bad.want)
		}
		if !b.Intermediate().Equal(was) {
			t.Fatalf("adopt %s changed the current intermediate", bad.name)
		}
	}

	if err := b.Adopt(p.CertPEM(), p.KeyPEM()); err != nil {
		t.Fatal(err)
	}
	if !b.Intermediate().Equal(a.Intermediate()) || !slices.Contains(b.Permitted(), "example.org") {
		t.Fatalf("after adopting, it signs under %s permitting %q; want %s", ca.SerialOf(b.Intermediate()), b.Permitted(), ca.SerialOf(a.Intermediate()))
	}
	if err := b.Adopt(p.CertPEM(), p.KeyPEM()); err != nil {
		t.Fatalf("adopting the current one again: %v", err)
	}
	c, err := ca.Load(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Intermediate().Equal(a.Intermediate()) || len(c.Intermediates()) != 2 || !c.Intermediates()[1].Equal(was) {
		t.Fatalf("loaded again: current %s, %d intermediates; want the adopted one and the one it replaced kept", ca.SerialOf(c.Intermediate()), len(c.Intermediates()))
	}
	if entries, _ := os.ReadDir(filepath.Join(copyDir, "intermediates")); len(entries) != 2 {
		t.Errorf("the intermediates directory holds %d files, want the adopted key and the replaced certificate", len(entries))
	}
}
