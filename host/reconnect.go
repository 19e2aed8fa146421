package host

import (
	"math/rand/v2"
	"time"
)

// How long a host waits before trying the bus again, once every bus
// address it knows was tried: a random draw from [reconnectFloor,
// reconnectFloor + window), the window doubling with each round from
// reconnectFirst up to reconnectCap. A controller restarted finds its
// fleet's reconnects spread over the window they reached while it was
// down (some 4 to 16 s after a restart of a few seconds), not all within
// the same second: at 10,000 hosts the herd cut TLS handshakes short
// (nats.go's own wait is 1 s plus at most 1 s).
const (
	reconnectFloor = 250 * time.Millisecond
	reconnectFirst = time.Second
	reconnectCap   = 16 * time.Second
	// busTimeout bounds one try (dial, TLS handshake, the server's
	// answer): the bus's own TLS timeout is 5 s, and a host that gave up
	// sooner would only try again into the same queue.
	busTimeout = 5 * time.Second
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
