package daemon

import (
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

// ClaimDNSPort checks that addr (host:port) can be bound for UDP and TCP
// both, as the resolver binds it; a port 0 becomes a port free for both.
// The host is kept as given: a wildcard stays the wildcard.
func ClaimDNSPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	for try := 0; ; try++ {
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, port))
		if err != nil {
			return "", err
		}
		// The host as asked: the socket of 0.0.0.0 calls itself [::],
		// which would then bind IPv6 only.
		bound := net.JoinHostPort(host, strconv.Itoa(u.LocalAddr().(*net.UDPAddr).Port))
		t, err := net.Listen("tcp", bound)
		u.Close()
		if err == nil {
			t.Close()
			return bound, nil
		}
		if port != "0" || try == 20 {
			return "", err
		}
	}
}
