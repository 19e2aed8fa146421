package e2e

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/cli"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

func TestGenesisThenController(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	d := genesis(t, dir)
	addrs := waitReady(t, d, dir)

	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %o, want 700", info.Mode().Perm())
	}
	for path, want := range map[string]fs.FileMode{
		"operator.creds": 0o600, "controller/sign.key": 0o600, "controller/seal.key": 0o600, "host/node.creds": 0o600,
		"controller/ca/root.key": 0o600, "controller/ca/intermediate.key": 0o600,
	} {
		info, err := os.Stat(filepath.Join(dir, path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if info.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", path, info.Mode().Perm(), want)
		}
	}

	var first time.Time
	poll.Until(t, 10*time.Second, "alpha heard", func() error {
		nodes := nodeList(t, dir)
		if len(nodes) != 1 || nodes[0].Name != "alpha" {
			return fmt.Errorf("nodes %+v", nodes)
		}
		n := nodes[0]
		if n.LastHeard == nil || n.Facts == nil {
			return errors.New("alpha not heard yet, or no facts")
		}
		first = *n.LastHeard
		if len(n.HostVersion) != 64 || n.Protocol != spec.Protocol || !n.ProtocolKnown {
			return fmt.Errorf("heartbeat fields: version %q protocol %d", n.HostVersion, n.Protocol)
		}
		if n.Facts.Kernel != "" && n.Facts.Cores > 0 && n.Facts.MemoryBytes > 0 {
			return nil
		}
		return fmt.Errorf("facts %+v", n.Facts)
	})

	verifyBusChain(t, addrs)

	// mesh ca roots prints what /roots.pem serves.
	caOut, _, code := runMesh(t, "ca", "roots", "--dir", dir)
	resp, err := http.Get("http://" + addrs.HTTP + "/roots.pem")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if code != 0 || caOut != string(served) || !strings.HasPrefix(caOut, "-----BEGIN CERTIFICATE-----") {
		t.Errorf("mesh ca roots: exit %d, %q; /roots.pem %q", code, caOut, served)
	}

	// The host version is the SHA-256 of the running executable.
	nodes := nodeList(t, dir)
	if want := fileDigest(t, meshBin); nodes[0].HostVersion != want {
		t.Errorf("host version %s, want the binary's digest %s", nodes[0].HostVersion, want)
	}
	// mesh version says the same digest.
	var v cli.Version
	if err := json.Unmarshal([]byte(mustRun(t, "version", "--json")), &v); err != nil || v.SHA256 != nodes[0].HostVersion || v.Protocol != spec.Protocol {
		t.Errorf("mesh version --json: %+v (%v), want sha256 %s and protocol %d", v, err, nodes[0].HostVersion, spec.Protocol)
	}
	// /metrics names the same digest, the controller's running binary.
	resp, err = http.Get("http://" + addrs.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Labels are written in the order of their names.
	if want := `mesh_build_info{go="go[^"]*",goarch="` + runtime.GOARCH + `",goos="linux",sha256="` + nodes[0].HostVersion + `"}`; !regexp.MustCompile(want).Match(metrics) {
		t.Errorf("/metrics lacks %s:\n%s", want, metrics)
	}

	d.stop(t)
	if _, err := net.DialTimeout("tcp", addrs.Bus, time.Second); err == nil {
		t.Fatal("the bus still answers after SIGTERM")
	}

	d2 := start(t, "controller", "--dir", dir)
	addrs2 := waitReady(t, d2, dir)
	if addrs2.Bus != addrs.Bus {
		t.Errorf("restarted bus on %s, want the first port %s", addrs2.Bus, addrs.Bus)
	}
	poll.Until(t, 10*time.Second, "alpha heard again", func() error {
		n := nodeList(t, dir)[0]
		if n.LastHeard != nil && n.LastHeard.After(first) {
			return nil
		}
		return fmt.Errorf("last heard %v, first %v", n.LastHeard, first)
	})
	d2.stop(t)
}

// verifyBusChain fetches the bus's certificate chain over TLS and has
// openssl verify it against /roots.pem.
func verifyBusChain(t *testing.T, addrs spec.Addrs) {
	t.Helper()
	resp, err := http.Get("http://" + addrs.HTTP + "/roots.pem")
	if err != nil {
		t.Fatal(err)
	}
	roots, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	conn, err := tls.Dial("tcp", addrs.Bus, &tls.Config{InsecureSkipVerify: true}) // openssl verifies below
	if err != nil {
		t.Fatalf("TLS to the bus: %v", err)
	}
	chain := conn.ConnectionState().PeerCertificates
	conn.Close()
	if len(chain) < 2 {
		t.Fatalf("the bus sent %d certificates, want leaf and intermediate", len(chain))
	}
	dir := t.TempDir()
	write := func(name string, ders ...[]byte) string {
		var b bytes.Buffer
		for _, der := range ders {
			pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der})
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, b.Bytes(), 0o644)
		return p
	}
	rootsFile := filepath.Join(dir, "roots.pem")
	os.WriteFile(rootsFile, roots, 0o644)
	leaf := write("leaf.pem", chain[0].Raw)
	inter := write("inter.pem", chain[1].Raw)
	out, err := exec.Command("openssl", "verify", "-CAfile", rootsFile, "-untrusted", inter, leaf).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("openssl verify of the bus chain against /roots.pem: %v\n%s", err, out)
	}
	// And against a root it was not issued by, it must fail.
	other := write("other.pem", chain[1].Raw)
	if out, err := exec.Command("openssl", "verify", "-CAfile", other, leaf).CombinedOutput(); err == nil {
		t.Fatalf("openssl verified the bus chain against the intermediate alone as a root:\n%s", out)
	}
}

// fileDigest is the hex SHA-256 of the file at path, hashed in this
// process by the standard library, which uses the CPU's SHA instructions:
// a sha256sum process costs several times the CPU for each binary hashed.
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("hash %s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// snapshot is a directory tree: every path with its mode, size and content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			m[path] = "error " + err.Error()
			return nil
		}
		info, _ := e.Info()
		v := info.Mode().String()
		if !e.IsDir() {
			body, _ := os.ReadFile(path)
			v += fmt.Sprintf(" %d %x", len(body), body)
		}
		m[path] = v
		return nil
	})
	return m
}

func TestGenesisOverAMeshIsRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	d := genesis(t, dir)
	waitReady(t, d, dir)
	d.stop(t)

	before := snapshot(t, dir)
	_, errOut, code := runMesh(t, "genesis", "--dir", dir, "--mesh", "other", "--node", "beta", "--bus", port(t), "--http", port(t), "--dns", port(t))
	if code == 0 {
		t.Fatal("genesis over an existing mesh succeeded")
	}
	if !strings.Contains(errOut, "already holds a mesh") || !strings.Contains(errOut, "mesh controller --dir "+dir) {
		t.Errorf("refusal does not say what to do: %q", errOut)
	}
	after := snapshot(t, dir)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Error("genesis over an existing mesh changed the directory")
	}
}

func TestGenesisOnAnAddressInUseChangesNothing(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, flag := range []string{"--bus", "--http", "--dns"} {
		t.Run(flag, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			args := []string{"genesis", "--dir", dir, "--mesh", "m", "--node", "n", "--bus", port(t), "--http", port(t), "--dns", port(t)}
			for i := range args {
				if args[i] == flag {
					args[i+1] = l.Addr().String()
				}
			}
			_, errOut, code := runMesh(t, args...)
			if code != 1 || !strings.Contains(errOut, flag+" "+l.Addr().String()+" cannot be bound") {
				t.Errorf("exit %d, %q: want exit 1 naming %s", code, errOut, flag)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("genesis on a taken address left %s behind (%v)", dir, err)
			}
		})
	}
}

// TestKernelPortIsRefused: a port 0 becomes the port the kernel chose,
// kept in D/addrs.json and bound again at every start; when another
// process has taken it meanwhile, the start is refused, naming the
// address, and D keeps the port it kept rather than another the kernel
// chose. (This is why the rig's daemons never listen on port 0: see
// kernelPort.)
func TestKernelPortIsRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	d := launch(t, meshBin, "genesis", "--dir", dir, "--mesh", "test", "--node", "alpha",
		"--bus", "127.0.0.1:0", "--http", port(t), "--dns", port(t), "--dns-upstream", deadUpstream,
		"--address", "127.0.0.1", "--docker", "none")
	addrs := waitReady(t, d, dir)
	if strings.HasSuffix(addrs.Bus, ":0") {
		t.Fatalf("addrs.json keeps the bus at %s, not the port the kernel chose", addrs.Bus)
	}
	d.stop(t)

	l, err := net.Listen("tcp", addrs.Bus)
	if err != nil {
		t.Fatalf("take the kept port: %v", err)
	}
	defer l.Close()
	kept := func() string {
		config, _ := os.ReadFile(filepath.Join(dir, "config.yaml"))
		addrs, _ := os.ReadFile(filepath.Join(dir, "addrs.json"))
		return string(config) + string(addrs)
	}
	before := kept()
	c := launch(t, meshBin, "controller", "--dir", dir)
	var exit error
	poll.Until(t, 60*time.Second, "the controller's exit", func() error {
		select {
		case exit = <-c.done:
			c.done <- exit
			return nil
		default:
			return errors.New("still running:\n" + c.out.String())
		}
	})
	var ee *exec.ExitError
	if !errors.As(exit, &ee) || ee.ExitCode() != 1 || !strings.Contains(c.out.String(), "bus address "+addrs.Bus) || !strings.Contains(c.out.String(), "in use") {
		t.Errorf("controller on a taken kept port: %v, %q: want exit 1 naming the bus's address %s in use", exit, c.out.String(), addrs.Bus)
	}
	if kept() != before {
		t.Errorf("a start refused on a taken port changed config.yaml or addrs.json:\n%s\nwas\n%s", kept(), before)
	}
}
