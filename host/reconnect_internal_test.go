package host

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/nats-io/nats.go"
)

// TestReconnectDelaySpreads: each round's wait lies in its window, which
// doubles from 1 s to 16 s past a floor of 250 ms, and the draws of a
// fleet spread across it instead of landing together (nats.go's default,
// a fixed 1 s wait and 1 s of jitter, would fail the later rounds).
func TestReconnectDelaySpreads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		round  int
		window time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second},
		{5, 16 * time.Second}, {6, 16 * time.Second}, {100, 16 * time.Second},
	} {
		if got := reconnectDelay(tc.round, func(int64) int64 { return 0 }); got != reconnectFloor {
			t.Errorf("round %d, the least draw: %s, want %s", tc.round, got, reconnectFloor)
		}
		if got := reconnectDelay(tc.round, func(n int64) int64 { return n - 1 }); got != reconnectFloor+tc.window-1 {
			t.Errorf("round %d, the greatest draw: %s, want just under %s", tc.round, got, reconnectFloor+tc.window)
		}
		// 10,000 hosts in the same round: no tenth of the window holds
		// more than a fifth of them.
		r := rand.New(rand.NewPCG(1, uint64(tc.round)))
		var tenths [10]int
		for range 10000 {
			d := reconnectDelay(tc.round, r.Int64N) - reconnectFloor
			tenths[int(d*10/tc.window)]++
		}
		for i, n := range tenths {
			if n > 2000 {
				t.Errorf("round %d: %d of 10,000 waits in tenth %d of the window", tc.round, n, i)
			}
		}
	}
}

// TestFailedTriesLeaveNoSocketOpen: a bus that accepts and never answers
// fails every try's handshake; each try's socket is closed when the next
// is dialed, so only the try in flight is open. nats.go alone leaves each
// one open until the collector finds it (the reconnect loop does not
// close a socket whose handshake failed): fails with the dialer removed.
func TestFailedTriesLeaveNoSocketOpen(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted, closed atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c) // until the host closes its end
				closed.Add(1)
			}()
		}
	}()
	nc, err := nats.Connect("nats://"+l.Addr().String(),
		nats.SetCustomDialer(newBusDialer()),
		nats.Timeout(100*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(int) time.Duration { return 10 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	poll.Until(t, 20*time.Second, "five tries", func() error {
		if accepted.Load() >= 5 {
			return nil
		}
		return fmt.Errorf("%d tries", accepted.Load())
	})
	poll.Until(t, 5*time.Second, "every try but the one in flight closed", func() error {
		a, c := accepted.Load(), closed.Load()
		if c >= a-1 {
			return nil
		}
		return fmt.Errorf("%d tries, %d of them closed", a, c)
	})
}
