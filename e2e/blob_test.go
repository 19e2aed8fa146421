package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
)

// bigBlob is the size of the file TestBigBlobMemoryIsBoundedByTheChunk
// pushes, and maxBlobRSS how far above its idle peak the controller's
// process may go while it takes and serves it.
const (
	bigBlob    = 100 << 20
	maxBlobRSS = 64 << 20
)

// TestBigBlobMemoryIsBoundedByTheChunk registers a module with a 100 MiB
// file and pushes it to the controller's own node (one process: the
// controller takes the upload and serves the chunks, its host fetches and
// writes them). The CLI that registers it stays under 64 MiB, and the
// controller process's peak RSS (VmHWM) may rise less than 64 MiB
// above its peak before the register, and the file on the node has the
// declared digest.
func TestBigBlobMemoryIsBoundedByTheChunk(t *testing.T) {
	optin.NeedSlow(t, "registers and pushes 100 MiB")
	if testing.Short() {
		t.Skip("pushes 100 MiB; run without -short")
	}
	t.Parallel()
	root := t.TempDir()
	m := newMesh(t, "--root", root)

	dir := filepath.Join(t.TempDir(), "big")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := writePatterned(t, filepath.Join(dir, "big.bin"), bigBlob)
	if err := os.WriteFile(filepath.Join(dir, "module.json"), []byte(`{"name":"big","version":"1","resources":[{"file":{"path":"/opt/big.bin","source":"big.bin","mode":"0600"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}

	pid := m.d.cmd.Process.Pid
	idle := procKiB(t, pid, "VmHWM")
	began := time.Now()
	register := exec.Command(meshBin, "module", "register", "--dir", m.dir, dir)
	// The CLI's own peak, read from its /proc while it runs: its rusage
	// Maxrss would be this test process's (Go starts a child sharing the
	// parent's memory until exec, and Linux keeps that high-water mark:
	// 602 MiB once the fleet test had run here).
	var out bytes.Buffer
	register.Stdout, register.Stderr = &out, &out
	if err := register.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- register.Wait() }()
	var cliPeak int64
	for waiting := true; waiting; {
		if kib := vmHWM(register.Process.Pid); kib > 0 {
			cliPeak = max(cliPeak, kib<<10)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("mesh module register: %v\n%s", err, out.Bytes())
			}
			waiting = false
		case <-time.After(20 * time.Millisecond):
		}
	}
	registered := time.Since(began)
	t.Logf("the CLI's peak RSS while it registered: %d MiB", cliPeak>>20)
	if cliPeak > maxBlobRSS {
		t.Errorf("the CLI's peak RSS was %d MiB while uploading a %d MiB blob; the limit is %d MiB", cliPeak>>20, bigBlob>>20, maxBlobRSS>>20)
	}
	mustRun(t, "assign", "--dir", m.dir, "big", m.node)
	push(t, m.dir)
	t.Logf("%d MiB blob: register %v, register+assign+push %v", bigBlob>>20, registered.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

	if got := sha256File(t, filepath.Join(root, "opt/big.bin")); got != want {
		t.Fatalf("the node's /opt/big.bin has digest %s, want %s", got, want)
	}
	peak := procKiB(t, pid, "VmHWM")
	t.Logf("controller VmHWM: %d MiB idle, %d MiB after (+%d MiB)", idle>>10, peak>>10, (peak-idle)>>10)
	if rise := int64(peak-idle) << 10; rise > maxBlobRSS {
		t.Fatalf("the controller's peak RSS rose %d MiB above its idle %d MiB while taking and serving a %d MiB blob; the limit is %d MiB",
			rise>>20, idle>>10, bigBlob>>20, maxBlobRSS>>20)
	}
}

// writePatterned writes size pseudo-random bytes to path, a MiB at a time,
// and returns their SHA-256 in hex.
func writePatterned(t *testing.T, path string, size int) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.NewChaCha8([32]byte{'b', 'l', 'o', 'b'})
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= len(buf) {
		b := buf[:min(len(buf), left)]
		r.Read(b)
		h.Write(b)
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sha256File is the SHA-256 of the file at path, in hex, streamed.
func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// vmHWM is the peak RSS, in KiB, of the running process pid as its
// /proc/PID/status says; zero once it has gone.
func vmHWM(pid int) int64 {
	body, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
