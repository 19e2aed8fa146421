package host

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// How long a host waits before trying the bus again, once every bus
// address it knows was tried: a random draw from [reconnectFloor,
// reconnectFloor + window), the window doubling with each round from
// reconnectFirst up to reconnectCap. A controller restarted finds its
// fleet's reconnects spread over the window they reached while it was
// down (some 4 to 16 s after a restart of a few seconds), not all within
// the same second, where a large herd cuts TLS handshakes short (nats.go's
// own wait is 1 s plus at most 1 s).
const (
	reconnectFloor = 250 * time.Millisecond
	reconnectFirst = time.Second
	reconnectCap   = 16 * time.Second
	// busTimeout bounds one try (dial, TLS handshake, the server's
	// answer): the bus's own TLS timeout is 5 s, and a host that gave up
	// sooner would only try again into the same queue.
	busTimeout = 5 * time.Second
	// busPingEvery and busPingsOut end a connection whose server stopped
	// answering (paused, or cut off) within some 15 s: a fleet of
	// thousands pings its bus a few hundred times a second.
	busPingEvery = 5 * time.Second
	busPingsOut  = 3
)

// reconnectDelay is the wait before the round-th try (from 1) of every
// bus address, drawn with draw (rand.Int64N, or a test's).
func reconnectDelay(round int, draw func(int64) int64) time.Duration {
	window := reconnectFirst
	for i := 1; i < round && window < reconnectCap; i++ {
		window *= 2
	}
	window = min(window, reconnectCap)
	return reconnectFloor + time.Duration(draw(int64(window)))
}

// reconnectWait is reconnectDelay with a random draw, as nats.go's
// CustomReconnectDelay takes it.
func reconnectWait(round int) time.Duration { return reconnectDelay(round, rand.Int64N) }

// busDialer dials the bus for one connection (nats.SetCustomDialer), and
// closes the socket it dialed before each new one. nats.go (v1.55.0)
// leaves a reconnect's socket open when the handshake on it fails
// (doReconnect goes on to the next try without closing it) until the
// collector finalizes it. When a fleet reconnects to a restarted
// controller, handshakes time out by the thousand, and each failed try
// would hold its socket: the simulated hosts of one process run out of
// open files, and a real host holds one a try. A connection nats.go replaces is dead
// whichever way it went, so closing it again is harmless.
type busDialer struct {
	d    net.Dialer
	mu   sync.Mutex
	last net.Conn
}

func newBusDialer() *busDialer { return &busDialer{d: net.Dialer{Timeout: busTimeout}} }

func (b *busDialer) Dial(network, address string) (net.Conn, error) {
	b.mu.Lock()
	if b.last != nil {
		b.last.Close()
		b.last = nil
	}
	b.mu.Unlock()
	c, err := b.d.Dial(network, address)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.last = c
	b.mu.Unlock()
	return c, nil
}
