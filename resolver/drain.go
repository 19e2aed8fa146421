package resolver

import (
	"net"
	"sync"
	"time"
)

// drainListener is a TCP listener whose connections can be let finish the
// query they carry before the server closes them: miekg/dns's shutdown
// drops a connection whose query it has not read, and its client sees a
// reset, though the query was sent while the resolver served.
type drainListener struct {
	net.Listener
	mu       sync.Mutex
	conns    map[*drainConn]bool
	draining bool
	// accepting counts Accept calls under way: one that began before the
	// listener closed may still return a connection, owed an answer.
	accepting int
	closed    chan struct{} // closed by Close
	once      sync.Once
}

// drainConn is one accepted connection: owed says a query may be on it that
// has not been answered (from its accept, or a read, to a write).
type drainConn struct {
	net.Conn
	l *drainListener
}

func newDrainListener(l net.Listener) *drainListener {
	return &drainListener{Listener: l, conns: map[*drainConn]bool{}, closed: make(chan struct{})}
}

// Accept is the listener's, the connection counted owed before it returns;
// once draining, an accept that fails waits for the server to close the
// listener, so that the server sees a shutdown and not a failure.
func (l *drainListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.accepting++
	l.mu.Unlock()
	c, err := l.Listener.Accept()
	l.mu.Lock()
	l.accepting--
	draining := l.draining
	var d *drainConn
	if err == nil {
		d = &drainConn{Conn: c, l: l}
		l.conns[d] = true
	}
	l.mu.Unlock()
	if err != nil {
		if draining {
			<-l.closed
		}
		return nil, err
	}
	return d, nil
}

func (l *drainListener) set(c *drainConn, owed bool) {
	l.mu.Lock()
	if _, ok := l.conns[c]; ok || owed {
		l.conns[c] = owed
	}
	l.mu.Unlock()
}

// owing is how many connections may hold a query not yet answered, an
// accept under way counted as one.
func (l *drainListener) owing() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.accepting
	for _, owed := range l.conns {
		if owed {
			n++
		}
	}
	return n
}

// drain stops accepting (connections not accepted wait in the socket, for
// the next process a launcher hands it to) and waits, until deadline, for
// those accepted to be answered.
func (l *drainListener) drain(deadline time.Time) {
	l.mu.Lock()
	l.draining = true
	l.mu.Unlock()
	l.Listener.Close()
	for l.owing() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// Close closes the listener, once.
func (l *drainListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	l.Listener.Close()
	return nil
}

func (c *drainConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.l.set(c, true)
	}
	return n, err
}

func (c *drainConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.l.set(c, false)
	return n, err
}

func (c *drainConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
