package host

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
)

// TestEdgeGivesUpANameThatLeavesTheRoster: a public name taken out of
// the roster is no longer served (a handshake for it fails at once) and
// no longer renewed: with short-lived certificates, the name that stays
// is renewed and the one that left is not, past the moment its renewal
// fell due: the certificate the edge keeps for it stays the one it held
// when the name left. Pebble's order count cannot tell this: certmagic
// may renew a 40 s certificate moments after it was issued.
func TestEdgeGivesUpANameThatLeavesTheRoster(t *testing.T) {
	t.Parallel()
	rig := newEdgeRig(t, pebbletest.Validity(edgeShortLife))
	const stay, leave = "stay.example.test", "leave.example.test"
	backends := map[string]string{stay: edgePage(t, "stay"), leave: edgePage(t, "leave")}
	g := rig.edge(t, edgeShortRenew, backends)
	rig.waitLeaf(t, stay, 60*time.Second)
	rig.waitLeaf(t, leave, 60*time.Second)

	delete(backends, leave)
	g.take(edgeRoster(t, backends))
	stayed := rig.waitLeaf(t, stay, 5*time.Second)
	left := storedLeaf(t, rig.dir, leave)
	if _, err := rig.leaf(leave); err == nil {
		t.Errorf("%s still served once it left the roster", leave)
	}
	// The name that left would be renewed once it has edgeShortRenew's
	// share of its life left; a few of the edge's checks past that, and
	// past the renewal of the name that stays, it has not been.
	life := left.NotAfter.Sub(left.NotBefore)
	due := left.NotAfter.Add(-time.Duration(edgeShortRenew.window * float64(life)))
	past := due.Add(8 * edgeShortRenew.every)
	poll.Until(t, time.Until(past)+life, stay+" renewed, and "+leave+"'s renewal past due", func() error {
		got, err := rig.leaf(stay)
		renewed := err == nil && got.SerialNumber.Cmp(stayed.SerialNumber) != 0
		if renewed && time.Now().After(past) {
			return nil
		}
		return fmt.Errorf("%s renewed: %v (%v); %s's renewal due at %s",
			stay, renewed, err, leave, due.Format("15:04:05.000"))
	})
	if got := storedLeaf(t, rig.dir, leave); got.SerialNumber.Cmp(left.SerialNumber) != 0 {
		t.Errorf("%s renewed after it left the roster: serial %s, kept %s when it left", leave, got.SerialNumber, left.SerialNumber)
	}
	if _, err := rig.leaf(leave); err == nil {
		t.Errorf("%s served again after the renewals", leave)
	}
	t.Logf("%s renewed; %s checked %s past its renewal's due time", stay, leave, time.Since(due).Round(time.Millisecond))
}

// storedLeaf is the certificate the edge keeps for name under dir.
func storedLeaf(t *testing.T, dir, name string) *x509.Certificate {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, string(filepath.Separator)+name+".crt") {
			found = append(found, p)
		}
		return err
	})
	if err != nil || len(found) != 1 {
		t.Fatalf("the edge's certificate for %s under %s: %v (found %q)", name, dir, err, found)
	}
	b, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s holds no PEM", found[0])
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", found[0], err)
	}
	return c
}
