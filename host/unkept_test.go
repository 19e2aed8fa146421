package host_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
)

// TestUnkeptDeclarationIsReported: a host that cannot write its state (a
// full disk: the write fails through a fake) keeps nothing of a
// declaration, applies nothing of it, and reports why, once; when the
// disk has room again, the host asks for the declaration again, keeps it,
// applies it and reports the apply.
func TestUnkeptDeclarationIsReported(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var full atomic.Bool
	b.prepare = func(a *host.Agent) {
		host.CountStateWrites(a, func(int64) error {
			if full.Load() {
				return fmt.Errorf("write %s: %w", host.StateFile, syscall.ENOSPC)
			}
			return nil
		})
	}
	b.start()
	full.Store(true)
	b.publish(encode(t, b.declaration(1, fileResource("/f", "one"))), nil)
	r := b.report()
	if r.Seq != 1 || !strings.Contains(r.Unkept, "no space left on device") || r.Refused != "" || len(r.Results) != 0 {
		t.Fatalf("a declaration the host could not keep: %+v, want it reported unkept, saying why", r)
	}
	if b.exists("/f") {
		t.Fatal("a declaration not kept was applied")
	}
	full.Store(false)
	r = b.report()
	if r.Seq != 1 || r.Unkept != "" || len(r.Results) != 1 || r.Results[0].Outcome != spec.Created {
		t.Fatalf("with room again: %+v, want declaration 1 kept and applied", r)
	}
}
