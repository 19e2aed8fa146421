package statedir_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
)

// What is written is read back; the files have the modes the design
// gives them (the operator's credential 0600).
func TestFilesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	addrs := spec.Addrs{Bus: "127.0.0.1:4222", HTTP: "127.0.0.1:8480", DNS: "127.0.0.1:53"}
	if err := statedir.WriteAddrs(dir, addrs); err != nil {
		t.Fatal(err)
	}
	if got, err := statedir.ReadAddrs(dir); err != nil || got != addrs {
		t.Fatalf("ReadAddrs = %+v, %v; want %+v", got, err, addrs)
	}
	op := statedir.Operator{Mesh: "home", Seed: "SUAXXX", CARoot: "-----BEGIN CERTIFICATE-----\n"}
	if err := statedir.WriteOperator(dir, op); err != nil {
		t.Fatal(err)
	}
	if got, err := statedir.ReadOperator(dir); err != nil || got != op {
		t.Fatalf("ReadOperator = %+v, %v; want %+v", got, err, op)
	}
	if fi, err := os.Stat(filepath.Join(dir, statedir.OperatorCreds)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("operator.creds: %v, mode %v; want 0600", err, fi)
	}
	kc := statedir.Config{"root": {"/srv/root"}, "dns-upstream": {"127.0.0.1:9", "127.0.0.1:10"}, "dns-allow": nil, "reconcile": {"5m0s"}}
	if err := statedir.WriteConfig(dir, kc); err != nil {
		t.Fatal(err)
	}
	got, err := statedir.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	delete(kc, "dns-allow") // written as an empty list, read as absent
	if !reflect.DeepEqual(got, kc) {
		t.Fatalf("ReadConfig = %#v, want %#v", got, kc)
	}
}

// A missing config.yaml is an empty one; one that does not parse or names
// a key that is no kept flag is a *ConfigError naming the file.
func TestReadConfigRefuses(t *testing.T) {
	dir := t.TempDir()
	if kc, err := statedir.ReadConfig(dir); err != nil || len(kc) != 0 {
		t.Fatalf("ReadConfig of no file = %v, %v; want empty", kc, err)
	}
	for _, c := range []struct{ body, want string }{
		{"root: [\n", "is not YAML"},
		{"colour: blue\n", `"colour" is not a flag mesh keeps`},
		{"root: [/a, /b]\n", "root takes one value, not a list"},
		{"dns-upstream: [{a: 1}]\n", "dns-upstream holds"},
	} {
		if err := os.WriteFile(filepath.Join(dir, statedir.ConfigFile), []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := statedir.ReadConfig(dir)
		var bad *statedir.ConfigError
		if !errors.As(err, &bad) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), statedir.ConfigFile) {
			t.Errorf("config.yaml %q: %v; want a ConfigError saying %q", c.body, err, c.want)
		}
	}
}

// ReadAddrs of a directory that is no mesh's says what to check.
func TestReadAddrsOfNoMesh(t *testing.T) {
	dir := t.TempDir()
	if _, err := statedir.ReadAddrs(dir); err == nil || !strings.Contains(err.Error(), "is "+dir+" a mesh's state directory?") {
		t.Fatalf("ReadAddrs of an empty directory: %v", err)
	}
	os.WriteFile(filepath.Join(dir, statedir.AddrsFile), []byte(`{"dns":"127.0.0.1:53"}`), 0o644)
	if _, err := statedir.ReadAddrs(dir); err == nil || !strings.Contains(err.Error(), "names no bus address") {
		t.Fatalf("ReadAddrs of a host's addrs.json: %v", err)
	}
}

// One process at a time: a second Lock is refused naming what to do, and
// the lock is taken again once released.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	release, err := statedir.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := statedir.Lock(dir); err == nil || !strings.Contains(err.Error(), "another mesh process runs on "+dir) {
		t.Fatalf("a second Lock: %v", err)
	}
	release()
	again, err := statedir.Lock(dir)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	again()
}

// TestHolderOrphaned: the holder of D/.lock is taken for one on its way
// out (a launcher's waits for it) unless it runs on under the parent it
// wrote there; then it is another process, refused at once.
func TestHolderOrphaned(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, content string
		want          bool
	}{
		{"this process, its parent unchanged", fmt.Sprintf("%d %d\n", os.Getpid(), os.Getppid()), false},
		{"this process, another parent written", fmt.Sprintf("%d %d\n", os.Getpid(), os.Getppid()+1), true},
		{"a process that is gone", fmt.Sprintf("%d %d\n", gone.Process.Pid, os.Getpid()), true},
		{"nothing written", "", true},
		{"garbage", "holder\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, statedir.LockFile), []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := statedir.HolderOrphaned(dir); got != c.want {
				t.Errorf("HolderOrphaned with %q = %v, want %v", c.content, got, c.want)
			}
		})
	}
	// Lock writes who holds it: this process, under its parent.
	dir := t.TempDir()
	release, err := statedir.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if statedir.HolderOrphaned(dir) {
		b, _ := os.ReadFile(filepath.Join(dir, statedir.LockFile))
		t.Errorf("the lock this process holds reads as orphaned: %q", b)
	}
}
