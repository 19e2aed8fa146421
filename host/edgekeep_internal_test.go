package host

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
)

// The renewal tests' certificates live edgeShortLife; their edges check
// every quarter second and renew with three quarters of it left, so a
// certificate is renewed some 10 s after it is obtained.
const edgeShortLife = 40 * time.Second

var edgeShortRenew = edgeRenew{every: 250 * time.Millisecond, window: 0.75}

// TestEdgeRestartedServesItsKeptCertificates: an edge made again on the
// storage of one that stopped, as a host's edge is when the host
// restarts, serves each public name at once with the certificate kept
// there: the same serial, and no new order at the CA (still up, and
// counting).
func TestEdgeRestartedServesItsKeptCertificates(t *testing.T) {
	t.Parallel()
	rig := newEdgeRig(t)
	backends := map[string]string{"keep.example.test": edgePage(t, "keep"), "kept.example.test": edgePage(t, "kept")}
	g := rig.edge(t, edgeRenew{}, backends)
	first := map[string]string{}
	for name := range backends {
		first[name] = rig.waitLeaf(t, name, 60*time.Second).SerialNumber.String()
	}
	orders, issued := rig.pb.Orders(t), rig.pb.Issued(t)
	if orders != len(backends) {
		t.Fatalf("pebble took %d orders for %d names, want one each", orders, len(backends))
	}
	g.stop()
	if _, err := rig.leaf("keep.example.test"); err == nil {
		t.Fatal("the stopped edge still answers")
	}

	rig.edge(t, edgeRenew{}, backends)
	rig.servesAsKept(t, backends, first, "keep.example.test", "keep", "after the edge was made again", orders, issued)
}

// TestEdgeRenewsBeforeExpiryWithNoFailedRequest: a certificate is renewed
// before it expires, by certmagic's own timer, and the edge serves the
// new one from the next handshake on, while a client requesting every
// 100 ms (each on a new connection, the chain verified) sees no request
// fail across the renewal.
func TestEdgeRenewsBeforeExpiryWithNoFailedRequest(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "waits out a 40 s certificate's renewal")
	rig := newEdgeRig(t, pebbletest.Validity(edgeShortLife))
	const name = "renew.example.test"
	rig.edge(t, edgeShortRenew, map[string]string{name: edgePage(t, "renew")})
	first := rig.waitLeaf(t, name, 60*time.Second)
	load := rig.load(name, "renew")
	defer load.end()
	var renewed servedAt
	poll.Until(t, edgeShortLife, "a renewed certificate served", func() error {
		served, failed := load.state()
		for _, s := range served {
			if s.serial != first.SerialNumber.String() {
				renewed = s
				return nil
			}
		}
		return errors.New(strings.Join(failed, "; "))
	})
	if !renewed.at.Before(first.NotAfter) {
		t.Errorf("the renewed certificate was first served at %s, after the first expired at %s", renewed.at, first.NotAfter)
	}
	t.Logf("renewed: served %s after the first certificate's start, %s before its end", renewed.at.Sub(first.NotBefore).Round(time.Millisecond), first.NotAfter.Sub(renewed.at).Round(time.Millisecond))
	// A few requests more, on the renewed certificate.
	poll.Until(t, 10*time.Second, "requests on the renewed certificate", func() error {
		served, _ := load.state()
		if len(servedSince(served, renewed.at)) > 5 {
			return nil
		}
		return errors.New("")
	})
	load.end()
	served, failed := load.state()
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed across the renewal: %s", len(failed), len(served)+len(failed), strings.Join(failed, "; "))
	}
	t.Logf("%d requests across the renewal, none failed", len(served))
	if n := rig.pb.Issued(t); n < 2 {
		t.Errorf("pebble issued %d certificates, want the renewal's too", n)
	}
}

// TestEdgeKeepsServingWhenTheACMECAIsGone: with the ACME CA gone (Pebble
// stopped), the renewal certmagic attempts fails, and the name is still
// served, with the certificate served when the CA went away, while it is
// valid: no request of a client requesting every 100 ms fails.
func TestEdgeKeepsServingWhenTheACMECAIsGone(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "waits out a 40 s certificate's failed renewal")
	rig := newEdgeRig(t, pebbletest.Validity(edgeShortLife))
	// certmagic backs off a name's failed renewals for the whole process:
	// a name of this run's own, so a run of -count=N fails anew each time.
	name := "down-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".example.test"
	rig.edge(t, edgeShortRenew, map[string]string{name: edgePage(t, "down")})
	rig.waitLeaf(t, name, 60*time.Second)
	load := rig.load(name, "down")
	defer load.end()

	mark := len(rig.logs.String())
	rig.pb.Stop()
	gone := time.Now()
	kept := rig.waitLeaf(t, name, 5*time.Second)
	poll.Until(t, edgeShortLife, "a renewal failed with the CA gone", func() error {
		if renewalFailed(rig.logSince(mark), name) {
			return nil
		}
		return errors.New("")
	})
	failedAt := time.Now()
	t.Logf("a renewal failed %s after the CA went away; the certificate has %s left",
		failedAt.Sub(gone).Round(time.Millisecond), time.Until(kept.NotAfter).Round(time.Millisecond))
	poll.Until(t, 10*time.Second, "requests after the failed renewal", func() error {
		served, _ := load.state()
		if len(servedSince(served, failedAt)) > 5 {
			return nil
		}
		return errors.New("")
	})
	if got := rig.waitLeaf(t, name, 5*time.Second); got.SerialNumber.Cmp(kept.SerialNumber) != 0 {
		t.Errorf("served with serial %s after the failed renewal, want the one served when the CA went away, %s", got.SerialNumber, kept.SerialNumber)
	}
	load.end()
	served, failed := load.state()
	for _, s := range servedSince(served, gone) {
		if s.serial != kept.SerialNumber.String() {
			t.Errorf("a request at %s with the CA gone was served with serial %s, want %s", s.at.Format("15:04:05.000"), s.serial, kept.SerialNumber)
			break
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed: %s", len(failed), len(served)+len(failed), strings.Join(failed, "; "))
	}
}
