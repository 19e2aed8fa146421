package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/statedir"
)

// A failed run of the mesh: a store behind its log's compaction is
// removed, with its WAL files, and the mesh runs again (ErrRestart), in a
// cluster or alone; any other failure of a clustered controller runs it
// again after a pause. The failure of a controller alone, a run asked to
// run again and one whose context ended return their error as it came,
// and a run that ended well nil, at once; the store is kept.
func TestFailedRunRecovers(t *testing.T) {
	t.Parallel()
	boom := errors.New("JetStream system temporarily unavailable")
	behind := fmt.Errorf("journal: %w", journal.ErrBehind)
	clustered := &ClusterState{Peers: []Peer{{Server: "a"}, {Server: "b"}}}
	alone := &ClusterState{Peers: []Peer{{Server: "a"}}}
	cases := []struct {
		name    string
		cluster *ClusterState
		err     error
		ended   bool // the run's context ended
		// want are the errors the result wraps; none: the result is nil.
		want    []error
		same    bool // the result is err itself
		removed bool // the store is removed
		paused  bool
	}{
		{name: "behind, alone", err: behind, want: []error{ErrRestart, journal.ErrBehind}, removed: true},
		{name: "behind, one peer", cluster: alone, err: behind, want: []error{ErrRestart, journal.ErrBehind}, removed: true},
		{name: "behind, clustered", cluster: clustered, err: behind, want: []error{ErrRestart, journal.ErrBehind}, removed: true},
		{name: "failed, clustered", cluster: clustered, err: boom, want: []error{ErrRestart, boom}, paused: true},
		{name: "failed, alone", err: boom, want: []error{boom}, same: true},
		{name: "failed, one peer", cluster: alone, err: boom, want: []error{boom}, same: true},
		{name: "restart, clustered", cluster: clustered, err: ErrRestart, want: []error{ErrRestart}, same: true},
		{name: "failed as the context ended, clustered", cluster: clustered, err: boom, ended: true, want: []error{boom}, same: true},
		{name: "ended well, clustered", cluster: clustered},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db := filepath.Join(statedir.Controller(dir), mesh.DBFile)
			if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
				t.Fatal(err)
			}
			files := []string{db, db + "-wal", db + "-shm"}
			for _, f := range files {
				if err := os.WriteFile(f, []byte("store"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.ended {
				cancel()
			}
			m := &Mesh{cfg: MeshConfig{Dir: dir}, log: quiet}

			began := time.Now()
			got := m.recover(ctx, tc.cluster, tc.err)
			took := time.Since(began)

			if len(tc.want) == 0 && got != nil {
				t.Fatalf("recover = %v, want nil", got)
			}
			for _, w := range tc.want {
				if !errors.Is(got, w) {
					t.Fatalf("recover = %v, want it to wrap %v", got, w)
				}
			}
			if tc.same && got != tc.err {
				t.Fatalf("recover = %v, want the run's error itself", got)
			}
			if paused := took >= failedRunPause; paused != tc.paused {
				t.Fatalf("recover took %s: paused %v, want %v", took, paused, tc.paused)
			}
			for _, f := range files {
				_, err := os.Stat(f)
				if gone := errors.Is(err, os.ErrNotExist); gone != tc.removed {
					t.Fatalf("%s: %v; want removed %v", filepath.Base(f), err, tc.removed)
				}
			}
		})
	}
}

// A clustered controller whose run failed and whose context ends in the
// pause returns at once, with no error: the mesh was stopped.
func TestFailedRunPauseEndsWithTheContext(t *testing.T) {
	t.Parallel()
	m := &Mesh{cfg: MeshConfig{Dir: t.TempDir()}, log: quiet}
	ctx, cancel := context.WithTimeout(context.Background(), failedRunPause/10)
	defer cancel()
	began := time.Now()
	err := m.recover(ctx, &ClusterState{Peers: []Peer{{Server: "a"}, {Server: "b"}}}, errors.New("boom"))
	if err != nil {
		t.Fatalf("recover = %v, want nil once the context ended", err)
	}
	if took := time.Since(began); took >= failedRunPause {
		t.Fatalf("recover took %s, the whole pause, after its context ended", took)
	}
}
