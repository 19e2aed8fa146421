package host_test

import (
	"bytes"
	"encoding/json"
	"errors"
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

// TestRosterKeptApart: the roster lives in RosterFile, not state.json; a
// state.json that an earlier host wrote with the roster inside is read
// with it, and the first state write moves it to RosterFile before
// state.json loses it; RosterFile, once there, is what is read, and only
// WriteRoster changes it.
func TestRosterKeptApart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "host")
	if err := host.Init(dir, sampleState(), []byte("SUAEXAMPLESEED")); err != nil {
		t.Fatal(err)
	}
	// state.json as an earlier host wrote it: the roster inside.
	old := sampleState()
	old.Roster, old.RosterSig = []byte(`{"seq":1}`), []byte("sig1")
	body, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, host.StateFile), body, 0o600); err != nil {
		t.Fatal(err)
	}
	st, _, err := host.ReadState(dir)
	if err != nil || string(st.Roster) != `{"seq":1}` || string(st.RosterSig) != "sig1" {
		t.Fatalf("an earlier state: roster %q sig %q, %v; want the roster inside it", st.Roster, st.RosterSig, err)
	}
	if _, err := os.Stat(filepath.Join(dir, host.RosterFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reading made %s: %v", host.RosterFile, err)
	}
	st.AppliedSeq = 18
	if err := host.WriteState(dir, st); err != nil {
		t.Fatal(err)
	}
	body, err = os.ReadFile(filepath.Join(dir, host.StateFile))
	if err != nil || bytes.Contains(body, []byte(`"roster`)) {
		t.Fatalf("%s after a write: %s, %v; want no roster inside", host.StateFile, body, err)
	}
	if got, _, err := host.ReadState(dir); err != nil || string(got.Roster) != `{"seq":1}` || got.AppliedSeq != 18 {
		t.Fatalf("after the write: roster %q applied %d, %v; want the roster moved beside", got.Roster, got.AppliedSeq, err)
	}

	// A state write does not change the roster kept; WriteRoster does.
	st.Roster, st.RosterSig = []byte(`{"seq":9}`), []byte("sig9")
	if err := host.WriteState(dir, st); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := host.ReadState(dir); string(got.Roster) != `{"seq":1}` {
		t.Fatalf("a state write changed the kept roster to %q", got.Roster)
	}
	// Its bytes kept exactly as signed (not compacted), and refused when
	// they are not JSON.
	if err := host.WriteRoster(dir, []byte(`{ "seq": 2 }`), []byte("sig2")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := host.ReadState(dir); err != nil || string(got.Roster) != `{ "seq": 2 }` || string(got.RosterSig) != "sig2" {
		t.Fatalf("after WriteRoster: roster %q sig %q, %v", got.Roster, got.RosterSig, err)
	}
	if err := host.WriteRoster(dir, []byte(`{"seq":3`), []byte("sig3")); err == nil {
		t.Fatal("a roster that is not JSON was written")
	}
	if fi, err := os.Stat(filepath.Join(dir, host.RosterFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want mode 0600", host.RosterFile, fi, err)
	}

	// A RosterFile that does not decode is an error naming it, not "no
	// roster".
	if err := os.WriteFile(filepath.Join(dir, host.RosterFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := host.ReadState(dir); err == nil || !strings.Contains(err.Error(), host.RosterFile) {
		t.Fatalf("a broken %s read as %v, want an error naming it", host.RosterFile, err)
	}

	// One left in a directory without a state is not the next join's.
	other := filepath.Join(t.TempDir(), "host")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := host.WriteRoster(other, []byte(`{"seq":5}`), []byte("sig5")); err != nil {
		t.Fatal(err)
	}
	if err := host.Init(other, sampleState(), []byte("SUAEXAMPLESEED")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := host.ReadState(other); err != nil || got.Roster != nil {
		t.Fatalf("a join into a directory with a roster left: roster %q, %v; want none", got.Roster, err)
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
