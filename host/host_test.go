package host_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/host"
)

func sampleState() host.State {
	return host.State{
		Mesh:       "prod",
		Node:       "web1",
		Bus:        []string{"tls://10.0.0.1:4222", "tls://10.0.0.2:4222"},
		CAPin:      "sha256:" + strings.Repeat("ab", 32),
		CARoot:     "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
		SignKey:    "c2lnbmtleQ==",
		AppliedSeq: 17,
	}
}

func TestInitReadState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "host")
	st := sampleState()
	seed := []byte("SUAEXAMPLESEED")
	if err := host.Init(dir, st, seed); err != nil {
		t.Fatalf("Init: %v", err)
	}
	got, gotSeed, err := host.ReadState(dir)
	if err != nil {
		t.Fatalf("ReadState: %v", err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Errorf("ReadState = %+v, want %+v", got, st)
	}
	if !bytes.Equal(gotSeed, seed) {
		t.Errorf("seed = %q, want %q", gotSeed, seed)
	}
	for name, want := range map[string]os.FileMode{host.CredsFile: 0o600, host.StateFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("host directory mode: %v, %v; want 0700", fi.Mode().Perm(), err)
	}

	// WriteState keeps what Init wrote readable, with the new values.
	st.AppliedSeq = 18
	if err := host.WriteState(dir, st); err != nil {
		t.Fatal(err)
	}
	got, _, err = host.ReadState(dir)
	if err != nil || got.AppliedSeq != 18 {
		t.Errorf("after WriteState: %+v, %v", got, err)
	}
}

func TestInitRefusesExistingState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "host")
	if err := host.Init(dir, sampleState(), []byte("SUAFIRST")); err != nil {
		t.Fatal(err)
	}
	stateBefore, err := os.ReadFile(filepath.Join(dir, host.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	credsBefore, err := os.ReadFile(filepath.Join(dir, host.CredsFile))
	if err != nil {
		t.Fatal(err)
	}

	second := sampleState()
	second.Mesh = "other"
	second.AppliedSeq = 0
	err = host.Init(dir, second, []byte("SUASECOND"))
	if err == nil {
		t.Fatal("Init over an existing state succeeded")
	}
	if !strings.Contains(err.Error(), "already holds") {
		t.Errorf("Init error %q does not say the directory already holds a state", err)
	}
	stateAfter, err := os.ReadFile(filepath.Join(dir, host.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	credsAfter, err := os.ReadFile(filepath.Join(dir, host.CredsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateBefore, stateAfter) {
		t.Errorf("a refused Init changed the state:\n%s\nbecame\n%s", stateBefore, stateAfter)
	}
	if !bytes.Equal(credsBefore, credsAfter) {
		t.Error("a refused Init replaced the node's credential")
	}
}

func TestInitRefusesBadName(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "host")
	st := sampleState()
	st.Node = "Bad_Name"
	err := host.Init(dir, st, []byte("SUASEED"))
	if err == nil {
		t.Fatal("Init with node name Bad_Name succeeded")
	}
	if !strings.Contains(err.Error(), "Bad_Name") {
		t.Errorf("Init error %q does not name the value", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused Init created %s (stat: %v)", dir, err)
	}
}

func TestReadStateRefuses(t *testing.T) {
	tests := []struct {
		name  string
		state string
		want  string
	}{
		{"unknown field", `{"mesh":"prod","node":"web1","applied_seq":1,"applies":1}`, "unknown field"},
		{"trailing data", `{"mesh":"prod","node":"web1"} {}`, "trailing data"},
		{"not JSON", `mesh=prod`, "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, host.StateFile), []byte(tt.state), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, host.CredsFile), []byte("SUASEED\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := host.ReadState(dir)
			if err == nil {
				t.Fatalf("ReadState of %s succeeded", tt.state)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadState error %q does not contain %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), host.StateFile) {
				t.Errorf("ReadState error %q does not name the file", err)
			}
		})
	}
	t.Run("no credential", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "host")
		if err := host.Init(dir, sampleState(), []byte("SUASEED")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, host.CredsFile)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := host.ReadState(dir); err == nil || !strings.Contains(err.Error(), "credential") {
			t.Errorf("ReadState without node.creds = %v, want an error naming the credential", err)
		}
	})
}

func TestGatherFacts(t *testing.T) {
	f := host.GatherFacts()
	if len(f.Errors) != 0 {
		t.Errorf("GatherFacts reported errors on this machine: %q", f.Errors)
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"Arch", f.Arch != ""},
		{"OS", f.OS != ""},
		{"Kernel", f.Kernel != ""},
		{"Cores", f.Cores > 0},
		{"MemoryBytes", f.MemoryBytes > 0},
		{"DiskBytes", f.DiskBytes > 0},
		{"DiskFree <= DiskBytes", f.DiskFree <= f.DiskBytes},
		{"UptimeSecond", f.UptimeSecond > 0},
		{"Virtual", f.Virtual != ""},
		{"Distro", f.Distro != ""},
		{"Hostname", f.Hostname != ""},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("GatherFacts: %s not set: %+v", c.what, f)
		}
	}
	// The kernel is the running one, as uname reports it.
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		if want := strings.TrimSpace(string(b)); f.Kernel != want {
			t.Errorf("Kernel = %q, want %q", f.Kernel, want)
		}
	}
	// Quotes around os-release values are removed.
	if strings.ContainsAny(f.Distro+f.DistroVer, `"'`) {
		t.Errorf("Distro %q, DistroVer %q keep their quotes", f.Distro, f.DistroVer)
	}
}
