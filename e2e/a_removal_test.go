package e2e

// This file's name sorts first but for a_relayloss_test.go's on purpose:
// of the parallel tests go test releases sixteen at a time, it releases the
// package's first one first, and the test here waits some seconds, mostly
// idle, for a host to give up on the bus's refusals of its credential (the
// host's removal rule). Started first, it runs beside the others instead
// of after most of them. (a_relayloss_test.go's test, first when it runs,
// is an opt-in's.)

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/nats-io/nkeys"
)

// TestHealthzNamesThePartNotReady: while the host is not ready (the bus
// refuses its credential), /healthz says not ready and names it, and goes on
// saying so once the host has given up.
func TestHealthzNamesThePartNotReady(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	d := genesis(t, dir)
	addrs := waitReady(t, d, dir)
	d.stop(t)

	// The machine's own host is pointed at its own bus at every start, so
	// the bus is made to refuse it instead: a credential it never enrolled.
	other, _ := nkeys.CreateUser()
	seed, _ := other.Seed()
	if err := os.WriteFile(filepath.Join(dir, "host", host.CredsFile), seed, 0o600); err != nil {
		t.Fatal(err)
	}

	d2 := start(t, "controller", "--dir", dir)
	// Restarted on the addresses kept: the HTTP listener answers at the
	// same place, and the host never becomes ready there.
	poll.Until(t, 30*time.Second, "/healthz names the host", func() error {
		d2.alive(t)
		err := healthy(addrs.HTTP)
		if err == nil {
			t.Fatal("/healthz ready while the bus refuses the host")
		}
		if strings.Contains(err.Error(), "503") && strings.Contains(err.Error(), "host") {
			return nil
		}
		return err
	})
	// Once the host has given up (the bus refused it for good), the
	// controller serves on and still says so.
	poll.Until(t, 30*time.Second, "the host given up", func() error {
		out := d2.out.String()
		if strings.Contains(out, "serves on without a host") {
			return nil
		}
		return errors.New(out)
	})
	if err := healthy(addrs.HTTP); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "host") {
		t.Errorf("/healthz after the host gave up: %v, want 503 naming the host", err)
	}
}
