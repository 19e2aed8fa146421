package host

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// TestOutsideCauses: a failure is taken for one from outside the node when
// the controller, the bus or the engine is its cause, however wrapped (a
// controller that answered it failed, its store busy, among them); a
// failure of the declaration itself, a controller's refusal or its word
// that the request is wrong, or the host's own stop, is not.
func TestOutsideCauses(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("obtain the certificate for a.b: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("have the controller sign: %w", errNoController), true},
		{fmt.Errorf("fetch blob: %w", nats.ErrConnectionClosed), true},
		{fmt.Errorf("fetch blob: %w", nats.ErrTimeout), true},
		{fmt.Errorf("have the controller sign [web.b.internal]: %w", decoded(t, `{"error":"record certificate: database is locked (5) (SQLITE_BUSY)"}`)), true},
		{fmt.Errorf("fetch blob: %w", &spec.ReplyError{Kind: spec.ReplyFailed, Message: "read the blob: disk I/O error"}), true},
		{fmt.Errorf("have the controller sign [web.a.internal]: %w", decoded(t, `{"error":"node \"b\" may not hold web.a.internal","kind":"refused"}`)), false},
		{fmt.Errorf("have the controller sign: %w", decoded(t, `{"error":"malformed certificate request","kind":"caller"}`)), false},
		{fmt.Errorf("fetch blob: %w", &spec.ReplyError{Kind: spec.ReplyNotFound, Message: "no blob sha256:00"}), false},
		{fmt.Errorf("apply /x: %w", context.Canceled), false},
		{errors.New("bind source path does not exist: /srv/tls"), false},
		{errors.New("certificate name \"*.a\" is a wildcard"), false},
		{nil, false},
	} {
		if got := outside(c.err); got != c.want {
			t.Errorf("outside(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// decoded is the error the controller's reply body carries, as the host
// reads it.
func decoded(t *testing.T, body string) error {
	t.Helper()
	err := spec.DecodeReply([]byte(body), nil)
	if err == nil {
		t.Fatalf("the reply %s carries no error", body)
	}
	return err
}

// TestHealingBacksOff: the waits after passes that failed from outside
// double from a second up to the reconcile interval; a pass without one
// ends them; back on the bus, a pending pass is due at once and the waits
// start again from a second.
func TestHealingBacksOff(t *testing.T) {
	h := healing{most: 5 * time.Second}
	now := time.Now()
	var waits []time.Duration
	for range 5 {
		waits = append(waits, h.passed(true, now))
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}; fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	if due, wait := h.due(now); due || wait != 5*time.Second {
		t.Fatalf("due %v in %v, want not yet, in 5s", due, wait)
	}
	h.reconnected(now)
	if due, _ := h.due(now); !due {
		t.Fatal("back on the bus, the pending pass is not due at once")
	}
	if wait := h.passed(true, now); wait != time.Second {
		t.Fatalf("after the reconnect's pass failed again: %v, want 1s", wait)
	}
	if wait := h.passed(false, now); wait != 0 {
		t.Fatalf("a pass without a failure from outside: %v, want none", wait)
	}
	h.reconnected(now)
	if due, wait := h.due(now); due || wait != 0 {
		t.Fatalf("nothing pending, back on the bus: due %v in %v, want nothing", due, wait)
	}
}
