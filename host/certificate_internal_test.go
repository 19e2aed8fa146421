package host

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"go.uber.org/zap"
)

// certEngine is an engine under a new root whose certificates come from
// real certmagic over a storage of its own, its CSRs signed by a real CA
// in this process: the seam is the bus request (the mesh's end-to-end
// tests make it for real). signed counts the CSRs signed.
func certEngine(t testing.TB) (e *Engine, root string, c *certs, signed *int) {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "m", time.Now(), spec.Domain)
	if err != nil {
		t.Fatal(err)
	}
	signed = new(int)
	c = newCerts(certsConfig{dir: t.TempDir(), mesh: "m", root: auth.Root(), rootPEM: string(auth.RootsPEM()),
		sign: func(_ context.Context, der []byte) ([]byte, error) {
			csr, err := ca.ParseCSR(der)
			if err != nil {
				return nil, err
			}
			*signed++
			leaf, err := auth.SignCSR(csr, csr.DNSNames, time.Now(), time.Hour)
			return leaf.Chain, err
		}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(c.stop)
	root = t.TempDir()
	e = NewEngine(Services{Root: root, certs: c})
	return e, root, c, signed
}

func certResource(name, path string) spec.Resource {
	return spec.Resource{Name: spec.ResourceName("t", spec.KindCertificate, path), Kind: spec.KindCertificate, Module: "t",
		Spec: &spec.CertificateSpec{Name: name, Path: path}}
}

// served is the version dir's ..data names and the serial of the pair in
// it, which must be one.
func served(t *testing.T, dir string) (string, string) {
	t.Helper()
	v, err := os.Readlink(filepath.Join(dir, spec.CertDataLink))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, v, spec.CertFile), filepath.Join(dir, v, spec.CertKeyFile))
	if err != nil {
		t.Fatalf("version %s: %v", v, err)
	}
	leaf, err := parsePair(mustRead(t, filepath.Join(dir, v, spec.CertFile)), mustRead(t, filepath.Join(dir, v, spec.CertKeyFile)))
	if err != nil || len(pair.Certificate) != 2 {
		t.Fatalf("version %s: %v (%d certificates)", v, err, len(pair.Certificate))
	}
	return v, leaf.serial
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// versions are the version directories in dir.
func versions(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if isVersion(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestCertificateWritesOnlyWhatDiffers: the first apply obtains the
// certificate and writes the directory; the same apply again writes
// nothing and asks for nothing; a renewal in certmagic's storage is a new
// version and one swap of ..data, the links left as they are (seven
// writes: the version's directory, its three files, its mode, the new
// ..data and its rename), the version before kept for readers; the next
// renewal removes the oldest (one more).
func TestCertificateWritesOnlyWhatDiffers(t *testing.T) {
	t.Parallel()
	e, root, c, signed := certEngine(t)
	r := certResource("web.alpha.internal", "/srv/web/tls")
	dir := filepath.Join(root, "srv/web/tls")
	ctx := context.Background()

	results, record, writes := e.Apply(ctx, []spec.Resource{r}, nil)
	if results[0].Outcome != spec.Created || results[0].Error != "" || writes != 19 {
		t.Fatalf("first apply: %+v, %d writes, want created in 19 (2 parents, the directory, a version, the links)", results, writes)
	}
	if record[0].Certificate != "web.alpha.internal" {
		t.Errorf("record %+v names no certificate", record[0])
	}
	v1, s1 := served(t, dir)
	for _, f := range []struct {
		name string
		mode fs.FileMode
	}{{spec.CertFile, 0o644}, {spec.CertKeyFile, 0o600}, {spec.CertCAFile, 0o644}} {
		fi, err := os.Stat(filepath.Join(dir, f.name))
		if err != nil || fi.Mode().Perm() != f.mode {
			t.Errorf("%s: %v %v, want mode %v", f.name, fi.Mode(), err, f.mode)
		}
	}
	if got := string(mustRead(t, filepath.Join(dir, spec.CertCAFile))); got != c.rootPM {
		t.Errorf("ca.pem holds %q, want the mesh's root", got)
	}
	if held := CertificatesHeld(root, []spec.Resource{r, certResource("x.alpha.internal", "/srv/none")}); len(held) != 1 ||
		held[0].Serial != s1 || held[0].Name != "web.alpha.internal" || held[0].Path != "/srv/web/tls" || held[0].NotAfter.IsZero() {
		t.Errorf("certificates held: %+v, want the one served, %s", held, s1)
	}

	results, _, writes = e.Apply(ctx, []spec.Resource{r}, record)
	if results[0].Outcome != spec.Unchanged || writes != 0 || *signed != 1 {
		t.Fatalf("the same apply again: %+v, %d writes, %d CSRs signed; want unchanged, none, one", results, writes, *signed)
	}
	if got := e.Preview(ctx, []spec.Resource{r}, record); got[0].Outcome != spec.Unchanged {
		t.Errorf("preview of what is in place: %+v", got)
	}

	renew := func() {
		t.Helper()
		if err := c.magic.RenewCertSync(ctx, "web.alpha.internal", true); err != nil {
			t.Fatal(err)
		}
	}
	renew()
	if got := e.Preview(ctx, []spec.Resource{r}, record); got[0].Outcome != spec.Changed {
		t.Errorf("preview of a renewal not yet copied: %+v, want changed", got)
	}
	results, _, writes = e.Apply(ctx, []spec.Resource{r}, record)
	v2, s2 := served(t, dir)
	if results[0].Outcome != spec.Changed || writes != 7 || s2 == s1 || !strings.Contains(results[0].Note, s2) {
		t.Fatalf("after a renewal: %+v, %d writes, serial %s (was %s); want changed in 7 writes, naming the new serial", results, writes, s2, s1)
	}
	if got := versions(t, dir); !slices.Equal(got, []string{v1, v2}) && !slices.Equal(got, []string{v2, v1}) {
		t.Errorf("versions after the first renewal: %v, want %s and the one before, %s", got, v2, v1)
	}
	renew()
	results, _, writes = e.Apply(ctx, []spec.Resource{r}, record)
	v3, _ := served(t, dir)
	if results[0].Outcome != spec.Changed || writes != 8 {
		t.Errorf("after a second renewal: %+v, %d writes, want changed in 8", results, writes)
	}
	if got := versions(t, dir); len(got) != 2 || !slices.Contains(got, v3) || !slices.Contains(got, v2) {
		t.Errorf("versions after the second renewal: %v, want %s and %s", got, v3, v2)
	}
}

// TestCertificateStaysUnderTheRoot: a certificate's directory reached
// through a link out of the root, or something else standing at its path,
// fails the resource and writes nothing there.
func TestCertificateStaysUnderTheRoot(t *testing.T) {
	t.Parallel()
	e, root, _, _ := certEngine(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "tls")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/out/tls", "leads outside the root"},
		{"/tls", "a symbolic link is at"},
	} {
		results, _, _ := e.Apply(context.Background(), []spec.Resource{certResource("web.alpha.internal", tc.path)}, nil)
		if results[0].Outcome != spec.Failed || !strings.Contains(results[0].Error, tc.want) {
			t.Errorf("%s: %+v, want a failure saying %q", tc.path, results[0], tc.want)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("written outside the root: %v", entries)
	}
}

// TestCertificateRemoval: removed, the directory goes with its links and
// versions, and certmagic forgets the name; what someone else put in it
// stays, with the directory, and the note says so; a name another
// certificate resource still declares stays managed.
func TestCertificateRemoval(t *testing.T) {
	t.Parallel()
	e, root, c, _ := certEngine(t)
	ctx := context.Background()
	a, b := certResource("web.alpha.internal", "/srv/a"), certResource("web.alpha.internal", "/srv/b")
	_, record, _ := e.Apply(ctx, []spec.Resource{a, b}, nil)
	if err := os.WriteFile(filepath.Join(root, "srv/b/extra.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	// a goes; b still names the certificate, which stays.
	results, record, _ := e.Apply(ctx, []spec.Resource{b}, record)
	if got := results[1]; got.Outcome != spec.Removed || got.Error != "" {
		t.Fatalf("removing a: %+v", got)
	}
	if _, err := os.Lstat(filepath.Join(root, "srv/a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("srv/a after its removal: %v", err)
	}
	if _, ok, err := c.current(ctx, "web.alpha.internal"); !ok || err != nil {
		t.Errorf("the certificate b still declares was forgotten: %v %v", ok, err)
	}

	// b goes: what was put beside the certificate stays, and the name is
	// forgotten.
	results, _, _ = e.Apply(ctx, nil, record)
	if got := results[0]; got.Outcome != spec.Removed || !strings.Contains(got.Note, "extra.txt") {
		t.Errorf("removing b: %+v, want removed with a note naming extra.txt", got)
	}
	entries, err := os.ReadDir(filepath.Join(root, "srv/b"))
	if err != nil || len(entries) != 1 || entries[0].Name() != "extra.txt" {
		t.Errorf("srv/b after its removal: %v %v, want extra.txt alone", entries, err)
	}
	if _, ok, err := c.current(ctx, "web.alpha.internal"); ok || err != nil {
		t.Errorf("certmagic still keeps the certificate no resource declares: %v %v", ok, err)
	}
	if got := c.cache.AllMatchingCertificates("web.alpha.internal"); len(got) != 0 {
		t.Errorf("certmagic still manages the name: %d certificates cached", len(got))
	}
}

// TestCertmagicLogsThroughTheHost: what certmagic logs at error reaches the
// host's log, with its fields; below error, nothing, and nor does an
// obtain's failure, which the apply's report says (once).
func TestCertmagicLogsThroughTheHost(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	log := certmagicLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))).Named("maintenance")
	log.Info("lock acquired", zap.String("identifier", "web.alpha.internal"))
	log.Warn("certificate expires soon")
	log.Error("could not get certificate from issuer", zap.String("identifier", "web.beta.internal"))
	log.With(zap.Strings("identifiers", []string{"web.alpha.internal"})).Error("renewing managed certificates", zap.Error(errors.New("no controller answers")))
	got := buf.String()
	if strings.Count(got, "\n") != 1 || !strings.Contains(got, `level=ERROR msg="certmagic: renewing managed certificates" certmagic=maintenance error="no controller answers" identifiers=[web.alpha.internal]`) {
		t.Errorf("the host's log holds:\n%s", got)
	}
}

// BenchmarkCertificateObtain: a certificate obtained and its directory
// written, per name: certmagic's key, CSR and storage, the CA's signature
// in this process (the bus's round trip is not in it: the end-to-end test
// logs the whole, from the push), and the version, ..data and links.
func BenchmarkCertificateObtain(b *testing.B) {
	e, _, _, _ := certEngine(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		r := certResource(fmt.Sprintf("w%d.alpha.internal", i), fmt.Sprintf("/srv/w%d", i))
		if res, _, _ := e.Apply(ctx, []spec.Resource{r}, nil); res[0].Outcome != spec.Created {
			b.Fatalf("%+v", res[0])
		}
	}
}

// BenchmarkCertificateUnchanged: a pass over a certificate in place, which
// reads and writes nothing but the comparison.
func BenchmarkCertificateUnchanged(b *testing.B) {
	e, _, _, _ := certEngine(b)
	ctx := context.Background()
	r := certResource("web.alpha.internal", "/srv/web/tls")
	_, record, _ := e.Apply(ctx, []spec.Resource{r}, nil)
	for b.Loop() {
		if res, _, w := e.Apply(ctx, []spec.Resource{r}, record); res[0].Outcome != spec.Unchanged || w != 0 {
			b.Fatalf("%+v, %d writes", res[0], w)
		}
	}
}
