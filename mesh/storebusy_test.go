package mesh

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// lockStore holds c's store file with an exclusive lock from a second
// connection, as `sqlite3 mesh.db 'BEGIN EXCLUSIVE;'` does, until the
// returned function lets it go.
func lockStore(t *testing.T, c *Controller) (release func()) {
	t.Helper()
	dir, ok := controllerDirs.Load(c)
	if !ok {
		t.Fatal("the controller's directory is not known")
	}
	path := filepath.Join(dir.(string), DBFile)
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Error(err)
		}
		conn.Close()
		other.Close()
	}
	t.Cleanup(release)
	return release
}

// TestStoreBusyIsNotSilentNodes: while another connection holds the store
// with an exclusive lock, a node that heartbeats is shown heard (as the
// controller heard it), not silent; status names the busy store and gives
// no all-clear. Once the lock goes, the heartbeats are recorded and status says
// nothing of the store.
func TestStoreBusyIsNotSilentNodes(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now().Truncate(time.Second)}
	c, db := newController(t, clk)
	ctx := context.Background()
	beat := func() {
		t.Helper()
		hb := mustJSON(t, spec.Heartbeat{Node: "alpha", Time: clk.Now(), Protocol: spec.Protocol, IntervalMS: 1000})
		if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindHeartbeat), hb); err != nil {
			t.Fatal(err)
		}
	}
	beat()
	poll.Until(t, 10*time.Second, "alpha's heartbeat recorded", func() (bool, string) {
		n, err := db.Node(ctx, "alpha")
		return err == nil && n.LastHeard.Equal(clk.Now()), fmt.Sprintf("last heard %v, %v", n.LastHeard, err)
	})

	release := lockStore(t, c)
	clk.Add(time.Minute) // the store's record of alpha is a minute old: silent, were it believed
	beat()
	poll.Until(t, 30*time.Second, "status names the busy store and alpha heard", func() (bool, string) {
		res, err := c.status(ctx, spec.StatusRequest{})
		if err != nil {
			return false, fmt.Sprintf("status: %v", err)
		}
		st := nodeStatus(res, "alpha")
		ok := strings.HasPrefix(res.StoreBusy, "the store is busy since ") && strings.Contains(res.StoreBusy, "heartbeats are not being recorded") &&
			!st.Silent && st.LastHeard != nil && st.LastHeard.Equal(clk.Now()) && !res.AllClear &&
			len(res.Problems) > 0 && res.Problems[0] == res.StoreBusy
		return ok, fmt.Sprintf("store %q, alpha heard %s silent %v, all clear %v, problems %q", res.StoreBusy, st.Heard, st.Silent, res.AllClear, res.Problems)
	})
	if n, err := db.Node(ctx, "alpha"); err != nil || n.LastHeard.Equal(clk.Now()) {
		t.Fatalf("alpha's heartbeat recorded while the store was held: %v %v", n.LastHeard, err)
	}

	release()
	beat()
	poll.Until(t, 30*time.Second, "heartbeats recorded again", func() (bool, string) {
		res := statusOf(t, c)
		n, err := db.Node(ctx, "alpha")
		return res.StoreBusy == "" && err == nil && n.LastHeard.Equal(clk.Now()), fmt.Sprintf("store %q, recorded %v", res.StoreBusy, n.LastHeard)
	})
}
