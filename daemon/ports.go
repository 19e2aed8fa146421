package daemon

import (
	"io"
	"net"
	"strconv"
)

// HoldPort binds addr (host:port) for TCP and keeps it bound until the
// caller closes the listener; a port 0 becomes a free port, returned as
// the address bound. Holding each port until the last is claimed keeps two
// port 0s from coming back as the same port.
func HoldPort(addr string) (string, net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	return l.Addr().String(), l, nil
}

// HoldDNSPort binds addr (host:port) for UDP and TCP both, as the
// resolver binds it, and keeps both bound until the caller closes them; a
// port 0 becomes a port free for both, returned as the address bound. The
// host is kept as given: a wildcard stays the wildcard.
func HoldDNSPort(addr string) (string, io.Closer, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, err
	}
	for try := 0; ; try++ {
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, port))
		if err != nil {
			return "", nil, err
		}
		// The host as asked: the socket of 0.0.0.0 calls itself [::],
		// which would then bind IPv6 only.
		bound := net.JoinHostPort(host, strconv.Itoa(u.LocalAddr().(*net.UDPAddr).Port))
		t, err := net.Listen("tcp", bound)
		if err == nil {
			return bound, closers{u, t}, nil
		}
		u.Close()
		if port != "0" || try == 20 {
			return "", nil, err
		}
	}
}

// closers closes each of its closers.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Held are the sockets a start bound ahead of its parts, so that an
// address that cannot be bound changes nothing and no other process takes
// a port meanwhile: each is closed just before the part that binds its
// address starts, and at the end of Run. Any may be nil.
type Held struct {
	Bus, HTTP, DNS io.Closer
}

// release closes c, if any.
func release(c io.Closer) {
	if c != nil {
		c.Close()
	}
}
