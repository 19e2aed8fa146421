package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// certPath is where the tests' certificate module keeps its certificate,
// and certResource its resource's name.
const (
	certPath     = "/srv/web/tls"
	certResource = "tls:certificate:" + certPath
)

// certModule writes the module "tls": the route web (so that the node may
// hold web.NODE.internal) and the certificate for it in certPath, with
// more resources (JSON) after them. It returns its directory.
func certModule(t testing.TB, more ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	resources := append([]string{`{"certificate":{"name":"web.${node}.internal","path":"` + certPath + `"}}`}, more...)
	manifest := `{"name":"tls","version":"1","routes":[{"name":"web","port":443}],"resources":[` + strings.Join(resources, ",") + `]}`
	if err := os.WriteFile(filepath.Join(dir, "module.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// installed is what a certificate's directory serves, read as a reader
// should: ..data resolved once, the pair read from that version.
type installed struct {
	version string
	serial  string
	leaf    *x509.Certificate
}

// errVanished is a version that went between resolving ..data and reading
// it: a read that lost a race, not a pair seen half-written.
var errVanished = errors.New("the version went while it was read")

// readInstalled reads the pair dir serves, which must make a pair (the key
// the certificate's).
func readInstalled(dir string) (installed, error) {
	v, err := os.Readlink(filepath.Join(dir, spec.CertDataLink))
	if err != nil {
		return installed{}, fmt.Errorf("read %s: %w", spec.CertDataLink, err)
	}
	chain, err := os.ReadFile(filepath.Join(dir, v, spec.CertFile))
	if errors.Is(err, fs.ErrNotExist) {
		return installed{}, errVanished
	}
	if err != nil {
		return installed{}, err
	}
	key, err := os.ReadFile(filepath.Join(dir, v, spec.CertKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return installed{}, errVanished
	}
	if err != nil {
		return installed{}, err
	}
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return installed{}, fmt.Errorf("version %s: cert.pem and key.pem do not make a pair: %w", v, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return installed{}, err
	}
	return installed{version: v, serial: ca.SerialOf(leaf), leaf: leaf}, nil
}

// checkCertDir checks the files in dir as a TLS server and openssl use
// them: cert.pem verifies with openssl against ca.pem (its intermediate
// given as untrusted) for the name, key.pem is 0600 and the certificate's,
// and each file is a link to ..data/FILE.
func checkCertDir(t *testing.T, dir, name string) installed {
	t.Helper()
	in, err := readInstalled(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{spec.CertFile, spec.CertKeyFile, spec.CertCAFile} {
		if target, err := os.Readlink(filepath.Join(dir, f)); err != nil || target != spec.CertDataLink+"/"+f {
			t.Errorf("%s links to %q (%v), want %s/%s", f, target, err, spec.CertDataLink, f)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, spec.CertKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key.pem: %v %v, want mode 0600", fi.Mode(), err)
	}
	// The pair is read from the version ..data names, resolved once, as a
	// reader that wants a pair must: a renewal may swap ..data between two
	// reads through the links (a new version every ~40 s here).
	data, err := os.Readlink(filepath.Join(dir, spec.CertDataLink))
	if err != nil {
		t.Fatalf("%s: %v", spec.CertDataLink, err)
	}
	version := filepath.Join(dir, data)
	chain, _ := os.ReadFile(filepath.Join(version, spec.CertFile))
	var blocks []*pem.Block
	for rest := chain; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if len(blocks) != 2 {
		t.Fatalf("cert.pem holds %d certificates, want the leaf and its intermediate", len(blocks))
	}
	work := t.TempDir()
	os.WriteFile(filepath.Join(work, "leaf.pem"), pem.EncodeToMemory(blocks[0]), 0o644)
	os.WriteFile(filepath.Join(work, "intermediate.pem"), pem.EncodeToMemory(blocks[1]), 0o644)
	// -no_check_time: the chain and the name are checked here, not the
	// clock; a one-minute leaf read after a slow engine answered the push
	// may be past its end already, its renewal not yet swapped in.
	out, err := exec.Command("openssl", "verify", "-no_check_time", "-CAfile", filepath.Join(version, spec.CertCAFile), "-untrusted", filepath.Join(work, "intermediate.pem"),
		"-verify_hostname", name, filepath.Join(work, "leaf.pem")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": OK") {
		t.Errorf("openssl verify of cert.pem against ca.pem for %s: %v\n%s", name, err, out)
	}
	// The key is the certificate's, as openssl reads them.
	pub := func(args ...string) string {
		b, err := exec.Command("openssl", args...).Output()
		if err != nil {
			t.Fatalf("openssl %v: %v", args, err)
		}
		return string(b)
	}
	if a, b := pub("x509", "-in", filepath.Join(work, "leaf.pem"), "-noout", "-pubkey"), pub("pkey", "-in", filepath.Join(version, spec.CertKeyFile), "-pubout"); a != b {
		t.Errorf("key.pem's public key is not cert.pem's:\n%s\n%s", a, b)
	}
	return in
}

// issuedFor are the leaves the controller of the mesh in dir issued for
// name.
func issuedFor(t testing.TB, dir, name string) []spec.IssuedCert {
	t.Helper()
	var out []spec.IssuedCert
	req := spec.CACertsRequest{}
	for {
		res := call(t, dir, spec.CACerts, req)
		for _, c := range res.Certs {
			if len(c.Names) == 1 && c.Names[0] == name {
				out = append(out, c)
			}
		}
		if res.Next == 0 {
			return out
		}
		req.After = res.Next
	}
}

// dirStamp is what a pass that writes nothing leaves as it is: the
// directory's and the version's change times, and what ..data names.
func dirStamp(t *testing.T, dir string) string {
	t.Helper()
	var parts []string
	v, _ := os.Readlink(filepath.Join(dir, spec.CertDataLink))
	for _, p := range []string{dir, filepath.Join(dir, v), filepath.Join(dir, v, spec.CertKeyFile)} {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf("%s ino %d ctime %d.%09d", p, st.Ino, st.Ctim.Sec, st.Ctim.Nsec))
	}
	return v + "\n" + strings.Join(parts, "\n")
}

// certResult is the certificate's result in o's report from node.
func certResult(t *testing.T, r *spec.Report) spec.ResourceResult {
	t.Helper()
	for _, res := range r.Results {
		if res.Name == certResource {
			return res
		}
	}
	t.Fatalf("no result for %s in %+v", certResource, r.Results)
	return spec.ResourceResult{}
}

// TestCertificateThroughTheMesh: a certificate resource pushed to a node
// has its host obtain the certificate through the bus (certmagic, the CSR
// signed by the controller): the files are in place, openssl verifies
// cert.pem against ca.pem, the key is the certificate's. Passes that
// change nothing write nothing and ask the controller for nothing; a link
// deleted or a key changed is put right by the next pass. A restart of the
// machine finds the certificate in certmagic's storage and asks for none.
// A dry run of a node that holds none says one would be obtained.
func TestCertificateThroughTheMesh(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	m := newMesh(t, "--root", root, "--reconcile", "1s")
	dir := filepath.Join(root, certPath)
	name := "web.alpha.internal"

	mustRun(t, "module", "register", "--dir", m.dir, certModule(t))
	mustRun(t, "assign", "--dir", m.dir, "tls", "alpha")
	if o, code := pushJSON(t, m.dir, "--dry-run"); code != 0 {
		t.Errorf("dry run: exit %d %+v", code, o)
	} else if res := certResult(t, reportOf(t, o, "alpha")); res.Outcome != spec.Created || !strings.Contains(res.Note, "would be obtained from the controller") {
		t.Errorf("dry run: %+v, want it created, saying a certificate would be obtained", res)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the dry run made %s: %v", dir, err)
	}
	began := time.Now()
	o, code := pushJSON(t, m.dir)
	took := time.Since(began)
	if code != 0 || !o.OK {
		t.Fatalf("push: exit %d %+v", code, o)
	}
	rep := reportOf(t, o, "alpha")
	res := certResult(t, rep)
	t.Logf("first push: %s from the push to the report, the host's apply %s (the certificate obtained and written)", took.Round(time.Millisecond), time.Duration(rep.ApplyMicros)*time.Microsecond)
	if res.Outcome != spec.Created || !strings.Contains(res.Note, "for "+name+", valid until") {
		t.Errorf("certificate result %+v, want created with the certificate named", res)
	}
	first := checkCertDir(t, dir, name)
	if got := issuedFor(t, m.dir, name); len(got) != 1 || got[0].Serial != first.serial || got[0].Node != "alpha" {
		t.Fatalf("the controller issued %+v for %s, want the one leaf %s", got, name, first.serial)
	}

	// Passes that change nothing (reconcile every second) write nothing
	// and ask for nothing.
	stamp := dirStamp(t, dir)
	mustRun(t, "module", "register", "--dir", m.dir, fileModule(t, "other", "/srv/other", "x"))
	mustRun(t, "assign", "--dir", m.dir, "other", "alpha")
	o = push(t, m.dir)
	if res := certResult(t, reportOf(t, o, "alpha")); res.Outcome != spec.Unchanged {
		t.Errorf("a second push: the certificate %+v, want unchanged", res)
	}
	// Three reconcile passes: a pass that changes nothing leaves nothing
	// to poll for, so the test lets the time pass.
	time.Sleep(3 * time.Second)
	if again := dirStamp(t, dir); again != stamp {
		t.Errorf("passes that changed nothing wrote in the certificate's directory:\nbefore %s\nafter  %s", stamp, again)
	}
	if got := issuedFor(t, m.dir, name); len(got) != 1 {
		t.Errorf("passes that changed nothing asked for certificates: %+v", got)
	}

	// Drift: a link deleted is put back; a key changed is a new version of
	// the same certificate.
	since := time.Now()
	if err := os.Remove(filepath.Join(dir, spec.CertKeyFile)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "key.pem back", func() error {
		target, err := os.Readlink(filepath.Join(dir, spec.CertKeyFile))
		if err != nil {
			return err
		}
		if target == spec.CertDataLink+"/"+spec.CertKeyFile {
			return nil
		}
		return fmt.Errorf("key.pem links to %s", target)
	})
	waitCertReport(t, m.dir, since, spec.Changed)
	keyFile := filepath.Join(dir, first.version, spec.CertKeyFile)
	if err := os.WriteFile(keyFile, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "a new version with the right key", func() error {
		in, err := readInstalled(dir)
		if err != nil {
			return err
		}
		if in.version != first.version {
			return nil
		}
		return fmt.Errorf("still version %s", in.version)
	})
	fixed := checkCertDir(t, dir, name)
	if fixed.serial != first.serial {
		t.Errorf("drift corrected with certificate %s, want the one certmagic keeps, %s", fixed.serial, first.serial)
	}
	if _, err := os.Lstat(filepath.Join(dir, first.version)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the version that drifted is still there: %v", err)
	}

	// A restart, after a stop or a kill -9, finds the certificate in
	// certmagic's storage: the files stay, and the controller is asked for
	// nothing.
	for _, how := range []string{"SIGTERM", "kill -9"} {
		stamp = dirStamp(t, dir)
		if how == "SIGTERM" {
			m.d.stop(t)
		} else {
			m.d.kill9(t)
		}
		restarted := time.Now()
		m.d = start(t, "controller", "--dir", m.dir)
		m.addrs = waitReady(t, m.d, m.dir)
		poll.Until(t, 30*time.Second, "the restarted host's first report", func() error {
			r := nodeShow(t, m.dir, "alpha").LastReport
			if r != nil && r.Time.After(restarted) {
				return nil
			}
			return fmt.Errorf("%+v", r)
		})
		if r := nodeShow(t, m.dir, "alpha").LastReport; certResult(t, r).Outcome != spec.Unchanged {
			t.Errorf("after a restart (%s): %+v, want the certificate unchanged", how, certResult(t, r))
		}
		if again := dirStamp(t, dir); again != stamp {
			t.Errorf("the restart (%s) wrote in the certificate's directory:\nbefore %s\nafter  %s", how, stamp, again)
		}
		if got := issuedFor(t, m.dir, name); len(got) != 1 {
			t.Errorf("the host restarted (%s) asked for another certificate: %+v", how, got)
		}
	}

	// A name the node may not hold fails the resource with the
	// controller's reason, and nothing is written for it.
	stolen := filepath.Join(t.TempDir(), "stolen")
	os.MkdirAll(stolen, 0o755)
	os.WriteFile(filepath.Join(stolen, "module.json"), []byte(`{"name":"stolen","version":"1","resources":[{"certificate":{"name":"web.beta.internal","path":"/srv/stolen"}}]}`), 0o644)
	mustRun(t, "module", "register", "--dir", m.dir, stolen)
	mustRun(t, "assign", "--dir", m.dir, "stolen", "alpha")
	o, _ = pushJSON(t, m.dir)
	var refused spec.ResourceResult
	for _, r := range reportOf(t, o, "alpha").Results {
		if r.Name == "stolen:certificate:/srv/stolen" {
			refused = r
		}
	}
	if refused.Outcome != spec.Failed || !strings.Contains(refused.Error, `node "alpha" may not hold web.beta.internal`) {
		t.Errorf("a certificate for another node's name: %+v, want it failed with the controller's reason", refused)
	}
	if _, err := os.Lstat(filepath.Join(root, "srv/stolen")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused certificate's directory was made: %v", err)
	}
	mustRun(t, "unassign", "--dir", m.dir, "stolen", "alpha")
	push(t, m.dir)
}

// waitCertReport waits for a report of node alpha after since in which
// the certificate's outcome is want.
func waitCertReport(t *testing.T, dir string, since time.Time, want string) spec.ResourceResult {
	t.Helper()
	var got spec.ResourceResult
	poll.Until(t, 20*time.Second, "a report saying the certificate "+want, func() error {
		r := nodeShow(t, dir, "alpha").LastReport
		if r == nil || !r.Time.After(since) {
			return errors.New("no report since")
		}
		for _, res := range r.Results {
			if res.Name == certResource {
				got = res
			}
		}
		if got.Outcome == want {
			return nil
		}
		return fmt.Errorf("%+v", got)
	})
	return got
}

// reader reads dir as a server would, in a tight loop from a given moment
// until stopped: each read resolves ..data once and parses the pair it
// names. It counts the reads,
// the serials seen and any read that found a pair that is not one.
type reader struct {
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	reads  int
	lost   int // a version that went between resolving and reading
	bad    []string
	serial map[string]bool
}

// startReader starts a reader of dir at from: a loop that spins for the
// whole first half of a leaf's life, when no renewal can come, would burn a
// core of the test run for nothing.
func startReader(dir string, from time.Time) *reader {
	r := &reader{stop: make(chan struct{}), done: make(chan struct{}), serial: map[string]bool{}}
	go func() {
		defer close(r.done)
		select {
		case <-r.stop:
			return
		case <-time.After(time.Until(from)):
		}
		for {
			select {
			case <-r.stop:
				return
			default:
			}
			in, err := readInstalled(dir)
			r.mu.Lock()
			r.reads++
			switch {
			case errors.Is(err, errVanished):
				r.lost++
			case err != nil:
				r.bad = append(r.bad, err.Error())
			default:
				r.serial[in.serial] = true
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// end stops the reader and waits for it; again, it does nothing more.
func (r *reader) end() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// TestCertificateRenewal: with a lifetime of a minute and a renewal check
// every second, the host renews the certificate at about two thirds of its
// life and swaps it into the directory: a reader looping over the files
// throughout never reads a pair that is not one. The renewal is reported,
// writes only the certificate's directory, and renewals come once per
// two thirds of the lifetime, not at every check.
// TestCertificateUnassignedIsRenewedNoMore is the other half of its life.
func TestCertificateRenewal(t *testing.T) {
	optin.NeedSlow(t, "waits out a one-minute certificate's renewal")
	t.Parallel()
	root := t.TempDir()
	m := newMesh(t, "--root", root, "--cert-lifetime", "1m", "--cert-renew-check", "1s")
	if got := configOf(t, m.dir); !strings.Contains(got, "cert-renew-check: 1s\n") {
		t.Errorf("config.yaml does not keep --cert-renew-check:\n%s", got)
	}
	dir := filepath.Join(root, certPath)
	name := "web.alpha.internal"
	mustRun(t, "module", "register", "--dir", m.dir, certModule(t))
	mustRun(t, "assign", "--dir", m.dir, "tls", "alpha")
	push(t, m.dir)
	first := checkCertDir(t, dir, name)
	// No renewal before half the leaf's life (renewedOnce fails one that
	// comes sooner): the reader starts a little before then.
	life := first.leaf.NotAfter.Sub(first.leaf.NotBefore)
	r := startReader(dir, first.leaf.NotBefore.Add(life/2-5*time.Second))
	defer r.end()
	renewal := renewedOnce(t, m.dir, "alpha", dir, first)
	t.Logf("renewal: %d writes, note %q", renewal.writes, renewal.result.Note)
	poll.Until(t, 20*time.Second, "mesh node show names the renewed certificate", func() error {
		n := nodeShow(t, m.dir, "alpha")
		if n.Facts == nil || len(n.Facts.Certificates) != 1 {
			return errors.New("no certificate in the facts")
		}
		c := n.Facts.Certificates[0]
		if c.Serial == renewal.in.serial && c.Path == certPath && c.Name == name && c.NotAfter.Equal(renewal.in.leaf.NotAfter) {
			return nil
		}
		return fmt.Errorf("%+v", c)
	})

	r.end()
	r.mu.Lock()
	t.Logf("reader: %d reads, %d lost a race with the removal of an old version, serials %v", r.reads, r.lost, r.serial)
	if len(r.bad) > 0 {
		t.Errorf("the reader read %d pairs that were not one, the first: %s", len(r.bad), r.bad[0])
	}
	if !r.serial[first.serial] || len(r.serial) < 2 {
		t.Errorf("the reader saw serials %v, want the first and its renewal", r.serial)
	}
	r.mu.Unlock()
}

// TestCertificateUnassignedIsRenewedNoMore: unassigned, the certificate's
// directory goes (its parent stays), the facts name it no more, and
// certmagic stops renewing it: nothing more is issued for its name past
// when its leaf would have been renewed.
func TestCertificateUnassignedIsRenewedNoMore(t *testing.T) {
	optin.NeedSlow(t, "waits out a one-minute certificate's renewal window")
	t.Parallel()
	root := t.TempDir()
	m := newMesh(t, "--root", root, "--cert-lifetime", "1m", "--cert-renew-check", "1s")
	dir := filepath.Join(root, certPath)
	name := "web.alpha.internal"
	mustRun(t, "module", "register", "--dir", m.dir, certModule(t))
	mustRun(t, "assign", "--dir", m.dir, "tls", "alpha")
	push(t, m.dir)
	first := checkCertDir(t, dir, name)

	// Unassigned: the directory goes, and certmagic renews it no more.
	mustRun(t, "unassign", "--dir", m.dir, "tls", "alpha")
	o := push(t, m.dir)
	if res := certResult(t, reportOf(t, o, "alpha")); res.Outcome != spec.Removed || res.Error != "" {
		t.Errorf("unassigned: %+v, want removed", res)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after unassign: %v, want it gone", dir, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "/srv/web")); err != nil {
		t.Errorf("the certificate's parent directory went with it: %v", err)
	}
	poll.Until(t, 20*time.Second, "the facts name no certificate", func() error {
		n := nodeShow(t, m.dir, "alpha")
		if n.Facts != nil && len(n.Facts.Certificates) == 0 {
			return nil
		}
		return fmt.Errorf("%+v", n.Facts)
	})
	issued := len(issuedFor(t, m.dir, name))
	// Past when the leaf would have been renewed (two thirds of its life
	// from NotBefore), with a few checks' margin: the clock passing that
	// time is what is under test, and nothing is to happen.
	life := first.leaf.NotAfter.Sub(first.leaf.NotBefore)
	time.Sleep(time.Until(first.leaf.NotBefore.Add(life*2/3 + 5*time.Second)))
	if got := issuedFor(t, m.dir, name); len(got) != issued {
		t.Errorf("after unassign the controller issued %d more certificates for %s", len(got)-issued, name)
	}
}

// renewal is what renewedOnce saw.
type renewal struct {
	in     installed
	result spec.ResourceResult
	writes int
}

// renewedOnce waits for the certificate in dir to be renewed and checks
// the renewal: the new pair verifies, it was reported by a reconcile pass
// with its writes, and it came at about two thirds of the first's life (no
// renewal at every check before it).
func renewedOnce(t *testing.T, meshDir, node, dir string, first installed) renewal {
	t.Helper()
	name := first.leaf.DNSNames[0]
	var got renewal
	poll.Until(t, 90*time.Second, "the certificate renewed and swapped in", func() error {
		in, err := readInstalled(dir)
		if err != nil {
			return err
		}
		if in.serial == first.serial {
			return fmt.Errorf("still serial %s", in.serial)
		}
		got.in = in
		return nil
	})
	renewedAt := time.Now()
	life := first.leaf.NotAfter.Sub(first.leaf.NotBefore)
	if early := first.leaf.NotBefore.Add(life / 2); renewedAt.Before(early) {
		t.Errorf("renewed at %s, before half the validity (%s to %s)", renewedAt, first.leaf.NotBefore, first.leaf.NotAfter)
	}
	checkCertDir(t, dir, name)
	// One renewal per two thirds of a life: a slow engine can return the
	// push late enough that a second one came before this looked, but a
	// renewal at every check (each second) would have issued dozens.
	// Counted from the leaf first read: a push that returned late can find
	// an earlier leaf already renewed, and that one is not this one's.
	most := 1 + int(time.Since(first.leaf.NotBefore)/(life/2))
	issued := issuedFor(t, meshDir, name)
	from := slices.IndexFunc(issued, func(c spec.IssuedCert) bool { return c.Serial == first.serial })
	if from < 0 {
		t.Fatalf("the controller lists no certificate %s for %s among %d issued", first.serial, name, len(issued))
	}
	if n := len(issued) - from; n < 2 || n > most {
		t.Errorf("the controller issued %d certificates for %s from %s to the first renewal, want 2 to %d (no renewal at every check)", n, name, first.serial, most)
	}
	poll.Until(t, 20*time.Second, "the renewal reported", func() error {
		r := nodeShow(t, meshDir, node).LastReport
		if r == nil {
			return errors.New("no report")
		}
		for _, res := range r.Results {
			if res.Name == certResource && res.Outcome == spec.Changed && strings.Contains(res.Note, got.in.serial) {
				got.result, got.writes = res, r.Writes
				if r.Reconcile {
					return nil
				}
				return fmt.Errorf("%+v", r)
			}
		}
		return fmt.Errorf("%+v", r.Results)
	})
	return got
}

// TestCertificateRenewalKeepsTheContainer: a container that mounts the
// certificate's directory is not replaced by a renewal (its identity is its
// declared spec and the mount's path, not the certificate's bytes): it
// keeps its ID, the engine sees no event of the node's at all while the
// renewal is swapped in, and the container reads the renewed pair through
// its mount.
func TestCertificateRenewalKeepsTheContainer(t *testing.T) {
	optin.NeedSlow(t, "waits out a one-minute certificate's renewal")
	t.Parallel()
	m := newContainerNode(t, "--cert-lifetime", "1m", "--cert-renew-check", "1s", "--reconcile", "5m")
	tag, archive := image(t, m.cli)
	mod := certModule(t, fmt.Sprintf(`{"container":{"name":"tls","image":%q,"archive":"image.tar","command":["/bin/httpd","-f","-p","8443","-h","/tls"],"mounts":[{"source":%q,"target":"/tls","read_only":true}]}}`, tag, certPath))
	if err := os.Link(archive, filepath.Join(mod, "image.tar")); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "module", "register", "--dir", m.dir, mod)
	mustRun(t, "assign", "--dir", m.dir, "tls", m.a)
	push(t, m.dir)
	dir := filepath.Join(m.rootA, certPath)
	name := "web." + m.a + ".internal"
	first := checkCertDir(t, dir, name)
	id := m.id(t, m.a, "tls")
	since := time.Now()

	renewal := renewedOnce(t, m.dir, m.a, dir, first)
	t.Logf("renewal: %d writes, note %q", renewal.writes, renewal.result.Note)
	if got := m.id(t, m.a, "tls"); got != id {
		t.Errorf("the container was replaced by the renewal: %s, was %s", got, id)
	}
	if events := m.lifecycle(t, since); len(events) != 0 {
		t.Errorf("the renewal made engine events: %v", events)
	}
	out, err := exec.Command("docker", "exec", spec.ContainerName(m.a, "tls"), "cat", "/tls/"+spec.CertFile).Output()
	if err != nil {
		t.Fatalf("docker exec cat /tls/cert.pem: %v", err)
	}
	// The renewed leaf, or one renewed after it: a loaded engine can
	// return the push so late that the next renewal (each 40 s of a
	// minute's life) came before this looked.
	b, _ := pem.Decode(out)
	if b == nil {
		t.Fatalf("the container reads a cert.pem with no certificate:\n%s", out)
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil || ca.SerialOf(leaf) == first.serial || leaf.NotBefore.Before(renewal.in.leaf.NotBefore) {
		t.Errorf("the container reads a cert.pem that is not the renewed one (%s, from %s) nor a later one: %v\n%s",
			renewal.in.serial, renewal.in.leaf.NotBefore, err, out)
	}
}
