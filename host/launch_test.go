package host_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// deliverVersion puts a binary named digest in the host's versions and,
// with want, names it the version the node wants, as the binary resource
// does.
func deliverVersion(t *testing.T, hostDir, digest string, want bool) {
	t.Helper()
	versions := filepath.Join(hostDir, spec.VersionsDir)
	if err := os.MkdirAll(filepath.Join(versions, digest), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(versions, digest, spec.VersionBinary), []byte("a version"), 0o755); err != nil {
		t.Fatal(err)
	}
	if want {
		if err := os.WriteFile(filepath.Join(versions, spec.WantFile), []byte(digest+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func writeLaunch(t *testing.T, hostDir string, l spec.Launch) {
	t.Helper()
	body, _ := json.Marshal(l)
	if err := os.MkdirAll(filepath.Join(hostDir, spec.VersionsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, spec.VersionsDir, spec.LaunchFile), body, 0o600); err != nil {
		t.Fatal(err)
	}
}

// After an apply, a host a launcher runs stands aside (Run returns
// ErrStandAside) once its report is sent, when the version its node wants
// is delivered and is not bad, or bad and asked for again by a retry the
// launcher has not honoured; a bad one (its retry honoured already), one
// not delivered, or a host no launcher runs, runs on.
func TestStandAsideAfterTheReport(t *testing.T) {
	t.Parallel()
	other := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name      string
		launched  bool
		delivered bool
		bad       bool
		retry     int // the count the retry file asks, 0: none
		retried   int // the count launch.json says was honoured
		aside     bool
	}{
		{"launched", true, true, false, 0, 0, true},
		{"no launcher", false, true, false, 0, 0, false},
		{"bad", true, true, true, 0, 0, false},
		{"bad, a retry asked", true, true, true, 1, 0, true},
		{"bad, its retry honoured", true, true, true, 1, 1, false},
		{"not delivered", true, false, false, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t)
			b.launched = tc.launched
			b.start()
			// The launcher's record and the retry before want, so a host
			// that looks meanwhile sees them whole.
			if tc.bad {
				writeLaunch(t, b.hostDir, spec.Launch{Bad: map[string]spec.Fallback{other: {Digest: other, Reason: "exited", At: time.Now()}},
					Retried: map[string]int{other: tc.retried}})
			}
			if tc.retry > 0 {
				os.WriteFile(filepath.Join(b.hostDir, spec.VersionsDir, spec.RetryFile), spec.Retry{Digest: other, Count: tc.retry}.Encode(), 0o644)
			}
			if tc.delivered {
				deliverVersion(t, b.hostDir, other, true)
			} else if err := os.MkdirAll(filepath.Join(b.hostDir, spec.VersionsDir), 0o700); err == nil {
				os.WriteFile(filepath.Join(b.hostDir, spec.VersionsDir, spec.WantFile), []byte(other), 0o644)
			}
			b.publish(encode(t, b.declaration(1, fileResource("/a", "a"))), nil)
			select {
			case r := <-b.reports:
				if len(r.Results) != 1 || r.Results[0].Outcome != spec.Created {
					t.Fatalf("report %+v", r)
				}
			case err := <-b.ended:
				// The host looks after its start and after any event: one
				// that came once want was written stands aside before the
				// declaration does. Right where it should; nothing to
				// report.
				if !tc.aside || !errors.Is(err, host.ErrStandAside) {
					t.Fatalf("Run ended before the report: %v; want it to stand aside: %v", err, tc.aside)
				}
				return
			case <-time.After(20 * time.Second):
				t.Fatal("no report from the host within 20s")
			}
			select {
			case err := <-b.ended:
				if !tc.aside || !errors.Is(err, host.ErrStandAside) || !strings.Contains(err.Error(), other) {
					t.Fatalf("Run ended: %v; want it to stand aside for %s: %v", err, other, tc.aside)
				}
			case <-time.After(3 * time.Second):
				if tc.aside {
					t.Fatal("the host did not stand aside after its report")
				}
			}
		})
	}
}

// A want file that names no release digest is no version to stand aside
// for, though a directory of that name holds a binary: the launcher
// ignores it (spec.ReadWant), so standing aside for it would have the
// launcher start this version again after every apply.
func TestBadWantIsNoVersionToStandAsideFor(t *testing.T) {
	t.Parallel()
	other := strings.Repeat("ab", 32)
	for _, want := range []string{"notadigest", "./" + other, strings.ToUpper(other)} {
		t.Run(want, func(t *testing.T) {
			t.Parallel()
			b := newBench(t)
			b.launched = true
			deliverVersion(t, b.hostDir, other, false)
			deliverVersion(t, b.hostDir, strings.ToUpper(other), false)
			deliverVersion(t, b.hostDir, "notadigest", false)
			if err := os.WriteFile(filepath.Join(b.hostDir, spec.VersionsDir, spec.WantFile), []byte(want+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			b.start()
			for seq := uint64(1); seq <= 2; seq++ {
				b.publish(encode(t, b.declaration(seq, fileResource("/a", fmt.Sprint(seq)))), nil)
				select {
				case <-b.reports:
				case err := <-b.ended:
					t.Fatalf("Run ended: %v; want no standing aside for %q", err, want)
				case <-time.After(20 * time.Second):
					t.Fatal("no report from the host within 20s")
				}
			}
			// The second report came: the host did not stand aside
			// after the first apply, nor before it.
		})
	}
}

// A heartbeat carries the versions the launcher gave up on, newest first,
// at most spec.MaxFallbacks, read from launch.json as it is then.
func TestHeartbeatCarriesFallbacks(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.heartbeat = 50 * time.Millisecond
	beats := make(chan spec.Heartbeat, 256)
	if _, err := b.nc.Subscribe(spec.NodeSubject("alpha", spec.KindHeartbeat), func(m *nats.Msg) {
		var hb spec.Heartbeat
		if err := spec.Decode(m.Data, &hb); err == nil {
			beats <- hb
		}
	}); err != nil {
		t.Fatal(err)
	}
	b.nc.Flush()
	b.start()
	l := spec.Launch{Bad: map[string]spec.Fallback{}}
	t0 := time.Now().UTC()
	for i := range spec.MaxFallbacks + 1 {
		d := fmt.Sprintf("%064x", i)
		l.Bad[d] = spec.Fallback{Digest: d, Reason: fmt.Sprintf("reason %d", i), At: t0.Add(time.Duration(i) * time.Second)}
	}
	writeLaunch(t, b.hostDir, l)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case hb := <-beats:
			if len(hb.Fallbacks) == 0 {
				continue
			}
			if len(hb.Fallbacks) != spec.MaxFallbacks || hb.Fallbacks[0].Reason != fmt.Sprintf("reason %d", spec.MaxFallbacks) || hb.Fallbacks[spec.MaxFallbacks-1].Reason != "reason 1" {
				t.Fatalf("fallbacks %+v", hb.Fallbacks)
			}
			return
		case <-deadline:
			t.Fatal("no heartbeat carried the fallbacks within 10s")
		}
	}
}
