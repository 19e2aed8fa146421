package mesh

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
)

// TestNodeLocksAreFixedStripes: every node's lock is one of a fixed set,
// however many nodes come and go, so a removed node leaves none behind.
func TestNodeLocksAreFixedStripes(t *testing.T) {
	var l nodeLocks
	seen := map[int]bool{}
	for i := range 10 * nodeStripes {
		name := fmt.Sprintf("node-%d", i)
		m, k := l.of(name), stripe(name)
		if k < 0 || k >= nodeStripes || m != &l.stripes[k] {
			t.Fatalf("lock of %q is not stripe %d of %d", name, k, nodeStripes)
		}
		if l.of(name) != m {
			t.Fatalf("lock of %q changed", name)
		}
		seen[k] = true
	}
	if len(seen) < nodeStripes/2 {
		t.Errorf("%d nodes share %d stripes of %d", 10*nodeStripes, len(seen), nodeStripes)
	}
}

// TestNodeLocksTakeSharedStripesOnce: nodes on one stripe, and a node
// named twice, are locked together without deadlock, and all is released.
func TestNodeLocksTakeSharedStripesOnce(t *testing.T) {
	var l nodeLocks
	a := "node-0"
	b := ""
	for i := 1; b == ""; i++ {
		if n := fmt.Sprintf("node-%d", i); stripe(n) == stripe(a) {
			b = n
		}
	}
	done := make(chan struct{})
	go func() {
		l.lockAll([]string{b, a, "other", a})()
		close(done)
	}()
	poll.Until(t, 5*time.Second, "nodes sharing a stripe locked together", func() error {
		select {
		case <-done:
			return nil
		default:
			return errors.New("lockAll has not returned")
		}
	})
	for i := range l.stripes {
		if !l.stripes[i].TryLock() {
			t.Fatalf("stripe %d still locked", i)
		}
	}
}
