package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/statedir"
)

// TestClusterStateIsKept: a mesh run with --cluster for the first time
// gets a cluster of one, its route credentials in a 0600 file; a second
// run keeps its server name and credentials and moves its routes; the
// bus runs alone until a peer is added, then as a cluster routing to
// every peer.
func TestClusterStateIsKept(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(statedir.Controller(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := KeepClusterListen(dir, "home", "127.0.0.1:6222", "nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "home" || st.Server == "" || st.Password == "" || len(st.Peers) != 1 {
		t.Fatalf("a new cluster's state: %+v", st)
	}
	fi, err := os.Stat(filepath.Join(statedir.Controller(dir), ClusterFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the cluster's state file: %v, mode %v; want 0600", err, fi.Mode())
	}
	again, err := KeepClusterListen(dir, "home", "127.0.0.1:7222", "nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	if again.Server != st.Server || again.Password != st.Password || again.Peers[0].Route != "127.0.0.1:7222" {
		t.Fatalf("a second run's state %+v, first %+v", again, st)
	}
	auth, err := ca.Create(t.TempDir(), "home", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := busCluster(dir, auth); err != nil || cl != nil {
		t.Fatalf("the bus of a cluster of one: %+v, %v; want it alone", cl, err)
	}
	again.AddPeer(Peer{Server: "c-other", Route: "127.0.0.1:8222", Bus: "nats://127.0.0.1:5222"})
	if err := WriteClusterState(dir, again); err != nil {
		t.Fatal(err)
	}
	cl, err := busCluster(dir, auth)
	if err != nil || cl == nil {
		t.Fatalf("the bus of a cluster of two: %+v, %v", cl, err)
	}
	if !slices.Equal(cl.Peers, []string{"127.0.0.1:7222", "127.0.0.1:8222"}) || cl.ServerName != st.Server || cl.Name != "home" {
		t.Fatalf("the bus's cluster: %+v", cl)
	}
	if got := again.BusURLs(); !slices.Equal(got, []string{"nats://127.0.0.1:4222", "nats://127.0.0.1:5222"}) {
		t.Fatalf("bus URLs %q", got)
	}
}

// TestControllersForTheRoster: a controller alone (no cluster, or one of
// one) gives the roster no controllers' bus URLs; one of a cluster gives
// its advertised URLs and every peer's, each once.
func TestControllersForTheRoster(t *testing.T) {
	var none *ClusterState
	if got := none.controllers([]string{"nats://192.0.2.1:4222"}); got != nil {
		t.Fatalf("without a cluster: %q", got)
	}
	st := ClusterState{Server: "a", Peers: []Peer{{Server: "a", Bus: "nats://192.0.2.1:4222"}}}
	if got := st.controllers([]string{"nats://192.0.2.1:4222"}); got != nil {
		t.Fatalf("a cluster of one: %q", got)
	}
	st.AddPeer(Peer{Server: "b", Bus: "nats://192.0.2.2:4222"})
	st.AddPeer(Peer{Server: "c", Bus: "nats://192.0.2.3:4222"})
	want := []string{"nats://10.0.0.1:4222", "nats://192.0.2.1:4222", "nats://192.0.2.2:4222", "nats://192.0.2.3:4222"}
	if got := st.controllers([]string{"nats://10.0.0.1:4222", "nats://192.0.2.1:4222"}); !slices.Equal(got, want) {
		t.Fatalf("a cluster of three: %q, want %q", got, want)
	}
}

// TestDropStandalone: the streams a bus kept alone are dropped before its
// first run in a cluster, when the put-back mark says the log begins
// again from the store; never for a bus alone, without the mark, or one
// that ran clustered (its meta group kept).
func TestDropStandalone(t *testing.T) {
	t.Parallel()
	two := &ClusterState{Server: "c-1", Peers: []Peer{{Server: "c-1"}, {Server: "c-2"}}}
	one := &ClusterState{Server: "c-1", Peers: []Peer{{Server: "c-1"}}}
	for _, tc := range []struct {
		name       string
		st         *ClusterState
		mark, meta bool
		dropped    bool
	}{
		{"first run in a cluster", two, true, false, true},
		{"no put-back mark", two, false, false, false},
		{"ran clustered before", two, true, true, false},
		{"alone", one, true, false, false},
		{"no cluster", nil, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			stream := filepath.Join(dir, "js", "jetstream", "MESH", "streams", "DECLARATIONS", "msgs")
			if err := os.MkdirAll(stream, 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.meta {
				if err := os.MkdirAll(filepath.Join(dir, "js", "jetstream", "SYS", "_js_", "_meta_"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			mark := filepath.Join(dir, "mesh.db.put-back")
			if tc.mark {
				if err := os.WriteFile(mark, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			dropped, err := dropStandalone(tc.st, filepath.Join(dir, "js"), mark)
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(stream)
			if dropped != tc.dropped || errors.Is(statErr, os.ErrNotExist) != tc.dropped {
				t.Fatalf("dropped %t, the stream's directory: %v; want dropped %t", dropped, statErr, tc.dropped)
			}
		})
	}
}
