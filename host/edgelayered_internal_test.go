package host

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// sharedEdge is a new edge on the rig's directory that keeps its
// certificates in the edges' bucket over nc, a connection of its host,
// under the storage key key, renewing as renew says and serving the
// public names of backends until the test ends.
func (r *edgeRig) sharedEdge(t *testing.T, nc *nats.Conn, key []byte, renew edgeRenew, backends map[string]string) *edge {
	t.Helper()
	nk, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := seal.SealTo(nk.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	g := newEdge(r.dir, "", r.log)
	g.renew = renew
	t.Cleanup(g.stop)
	g.share(nc, nk)
	g.take(edgeRoster(t, backends))
	e := spec.EdgeSpec{Name: "edge", HTTP: r.httpAddr, HTTPS: r.httpsAddr, ACMECA: r.pb.Directory, Email: "ops@example.org", ACMERoots: r.pb.TLSRoots,
		StorageKey: sealed, StorageDigest: spec.SealedDigestPrefix + strings.Repeat("0", 64)}
	if err := g.configure(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.serves.magic.Storage.(*edgeLayered); !ok {
		t.Fatalf("the edge keeps its certificates in %T, want the bucket over its own copy", g.serves.magic.Storage)
	}
	return g
}

// checkEdgeModes fails t unless every directory under dir is 0700 and
// every file 0600, certmagic's lock files (which hold two times, no
// secret, and are gone once released) aside.
func checkEdgeModes(t *testing.T, dir string) (files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && info.Mode().Perm() != 0o700:
			t.Errorf("%s is %v, want 0700", p, info.Mode().Perm())
		case !d.IsDir() && strings.HasSuffix(p, ".lock"):
		case !d.IsDir():
			files++
			if info.Mode().Perm() != 0o600 {
				t.Errorf("%s is %v, want 0600", p, info.Mode().Perm())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// keptLeaf is the certificate for name in the edge's own copy in dir.
func keptLeaf(dir, name string) (*x509.Certificate, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "certificates", "*", name, name+".crt"))
	if err != nil || len(matches) != 1 {
		return nil, fmt.Errorf("%s's certificate in %s: %d found, %v", name, dir, len(matches), err)
	}
	pemBytes, err := os.ReadFile(matches[0])
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM", matches[0])
	}
	return x509.ParseCertificate(block.Bytes)
}

// TestEdgeRestartedWithTheBusDownServesItsOwnCopies: an edge on the
// edges' bucket obtains its certificates, and keeps a copy of everything
// in its host's directory, in the clear as certmagic writes it, 0600 in
// 0700 directories. With the bus gone (the controller down), an edge made
// again on that directory, as when its host restarts, starts at once and
// serves every name with the certificate kept there: the same serials, a
// page through it, and no new order at the CA.
func TestEdgeRestartedWithTheBusDownServesItsOwnCopies(t *testing.T) {
	t.Parallel()
	rig := newEdgeRig(t)
	b := startEdgeBus(t, map[string]bool{"alpha": true})
	key := edgeKey(t)
	backends := map[string]string{"near.example.test": edgePage(t, "near"), "far.example.test": edgePage(t, "far")}
	g := rig.sharedEdge(t, b.node(t, "alpha"), key, edgeRenew{}, backends)
	first := map[string]string{}
	for name := range backends {
		first[name] = rig.waitLeaf(t, name, 60*time.Second).SerialNumber.String()
	}
	orders, issued := rig.pb.Orders(t), rig.pb.Issued(t)
	if orders != len(backends) {
		t.Fatalf("pebble took %d orders for %d names, want one each", orders, len(backends))
	}
	g.stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bucket := b.openStore(t, "alpha", key)
	for name := range backends {
		kept, err := keptLeaf(rig.dir, name)
		if err != nil {
			t.Fatal(err)
		}
		if kept.SerialNumber.String() != first[name] {
			t.Errorf("%s: the host's copy holds serial %s, want the served %s", name, kept.SerialNumber, first[name])
		}
		keys, err := bucket.List(ctx, "certificates", true)
		if err != nil || !strings.Contains(strings.Join(keys, " "), "/"+name+"/"+name+".crt") {
			t.Errorf("%s: not in the bucket: %q, %v", name, keys, err)
		}
	}
	if n := checkEdgeModes(t, rig.dir); n < 3*len(backends)+1 {
		t.Errorf("the host's copy holds %d files, want each name's certificate, key and metadata, and the account", n)
	}

	b.stop()
	nc := b.node(t, "alpha", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if nc.IsConnected() {
		t.Fatal("the host connected to a bus that is gone")
	}
	restarted := time.Now()
	rig.sharedEdge(t, nc, key, edgeRenew{}, backends)
	if d := time.Since(restarted); d > 2*time.Second {
		t.Errorf("the edge took %s to start with the bus down", d)
	}
	rig.servesAsKept(t, backends, first, "near.example.test", "near", "with the bus down", orders, issued)
}

// TestEdgeKeepsServingWhenTheBusIsGone: with the bus gone while an edge
// on the edges' bucket runs, the name stays served with no failed request
// of a client requesting every 100 ms: the certificate is renewed when
// due through the host's own copy (where the renewed one is kept), and
// once that copy is broken too, a renewal that fails on storage leaves
// the name served with the certificate it had.
func TestEdgeKeepsServingWhenTheBusIsGone(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "waits out two renewals of a 40 s certificate")
	rig := newEdgeRig(t, pebbletest.Validity(edgeShortLife))
	b := startEdgeBus(t, map[string]bool{"alpha": true})
	// certmagic backs off a name's failed renewals for the whole process:
	// a name of this run's own, so a run of -count=N fails anew each time.
	name := "cut-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".example.test"
	rig.sharedEdge(t, b.node(t, "alpha"), edgeKey(t), edgeShortRenew, map[string]string{name: edgePage(t, "cut")})
	first := rig.waitLeaf(t, name, 60*time.Second)
	load := rig.load(name, "cut")
	defer load.end()

	b.stop()
	gone := time.Now()
	var renewed string
	poll.Until(t, edgeShortLife, "a certificate renewed with the bus gone", func() error {
		served, failed := load.state()
		for _, s := range servedSince(served, gone) {
			if s.serial != first.SerialNumber.String() {
				renewed = s.serial
				return nil
			}
		}
		return errors.New(strings.Join(failed, "; "))
	})
	t.Logf("renewed %s after the bus went away", time.Since(gone).Round(time.Millisecond))
	if kept, err := keptLeaf(rig.dir, name); err != nil || kept.SerialNumber.String() != renewed {
		t.Errorf("the host's copy after the renewal with the bus gone: %v, %v; want serial %s", kept.SerialNumber, err, renewed)
	}

	// The host's copy broken: every storage operation fails.
	if err := os.Rename(rig.dir, rig.dir+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rig.dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := len(rig.logs.String())
	poll.Until(t, edgeShortLife, "a renewal failed on storage", func() error {
		for line := range strings.Lines(rig.logSince(mark)) {
			if strings.Contains(line, name) && (strings.Contains(line, "job failed") || strings.Contains(line, `msg="certificate not obtained`)) {
				return nil
			}
		}
		return errors.New("")
	})
	failedAt := time.Now()
	poll.Until(t, 10*time.Second, "requests after the failed renewal", func() error {
		served, _ := load.state()
		if len(servedSince(served, failedAt)) > 5 {
			return nil
		}
		return errors.New("")
	})
	load.end()
	served, failed := load.state()
	for _, s := range servedSince(served, failedAt) {
		if s.serial != renewed {
			t.Errorf("a request at %s after the failed renewal was served with serial %s, want %s", s.at.Format("15:04:05.000"), s.serial, renewed)
			break
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed with the bus gone: %s", len(failed), len(served)+len(failed), strings.Join(failed, "; "))
	}
}

// TestEdgeLayeredStorage: the edges' storage over the host's copy writes
// every value to both, the copy in the clear and 0600; the bucket's "no
// such key" is its answer. With the bus gone, reads, lists and locks are
// the copy's, at once, and writes and deletions go to it; with the bus
// back, those are copied up to the bucket, and locks are the bucket's
// again.
func TestEdgeLayeredStorage(t *testing.T) {
	t.Parallel()
	b := startEdgeBus(t, map[string]bool{"alpha": true, "beta": true})
	key := edgeKey(t)
	dir := filepath.Join(t.TempDir(), EdgeDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the storage's log:\n%s", logs.String())
		}
	})
	nc := b.node(t, "alpha", nats.ReconnectWait(100*time.Millisecond), nats.MaxReconnects(-1))
	s := newEdgeLayered(dir, nc, key, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	other := b.openStore(t, "beta", key)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	local := &certmagic.FileStorage{Path: dir}

	x, y := "certificates/ca/x.example.org/x.example.org.crt", "certificates/ca/y.example.org/y.example.org.crt"
	if err := s.Store(ctx, x, []byte("PEM x")); err != nil {
		t.Fatal(err)
	}
	if v, err := other.Load(ctx, x); err != nil || string(v) != "PEM x" {
		t.Errorf("the bucket's %s: %q, %v", x, v, err)
	}
	if v, err := local.Load(ctx, x); err != nil || string(v) != "PEM x" {
		t.Errorf("the host's copy of %s: %q, %v", x, v, err)
	}
	checkEdgeModes(t, dir)
	if err := local.Store(ctx, "only/here", []byte("local")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "only/here"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a value the bucket does not hold, with the bus up: %v, want fs.ErrNotExist", err)
	}

	b.stop()
	poll.Until(t, 10*time.Second, "the connection down", func() error {
		if !nc.IsConnected() {
			return nil
		}
		return errors.New("")
	})
	start := time.Now()
	if v, err := s.Load(ctx, x); err != nil || string(v) != "PEM x" {
		t.Errorf("load %s with the bus gone: %q, %v", x, v, err)
	}
	if err := s.Store(ctx, y, []byte("PEM y")); err != nil {
		t.Errorf("store with the bus gone: %v", err)
	}
	if err := s.Delete(ctx, x); err != nil {
		t.Errorf("delete with the bus gone: %v", err)
	}
	if !s.Exists(ctx, y) || s.Exists(ctx, x) {
		t.Error("exists with the bus gone says otherwise than what was written")
	}
	if keys, err := s.List(ctx, "certificates/ca", true); err != nil || !slices.Contains(keys, y) || slices.Contains(keys, x) {
		t.Errorf("list with the bus gone: %q, %v", keys, err)
	}
	if info, err := s.Stat(ctx, y); err != nil || !info.IsTerminal || info.Size != int64(len("PEM y")) {
		t.Errorf("stat with the bus gone: %+v, %v", info, err)
	}
	if err := s.Lock(ctx, "issue_cert_y"); err != nil {
		t.Fatalf("lock with the bus gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "locks", "issue_cert_y.lock")); err != nil {
		t.Errorf("the lock taken with the bus gone is not the host's: %v", err)
	}
	if err := s.Unlock(ctx, "issue_cert_y"); err != nil {
		t.Errorf("unlock with the bus gone: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the operations with the bus gone took %s", d)
	}

	b.run(t)
	poll.Until(t, 20*time.Second, "what was written with the bus gone copied up", func() error {
		s.Exists(ctx, "certificates") // the bucket answering starts the copying
		v, err := other.Load(ctx, y)
		if err != nil || string(v) != "PEM y" {
			return fmt.Errorf("%s: %q, %v", y, v, err)
		}
		_, err = other.Load(ctx, x)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%s: %v", x, err)
	})
	if err := s.Lock(ctx, "issue_cert_z"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.kvOf(t).Get(ctx, bucketKey("l", "issue_cert_z")); err != nil {
		t.Errorf("the lock taken with the bus back is not the bucket's: %v", err)
	}
	if err := s.Unlock(ctx, "issue_cert_z"); err != nil {
		t.Error(err)
	}
}
