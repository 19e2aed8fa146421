package spec

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
)

// MaxControllers caps the controllers' bus URLs a roster carries: a few
// controllers, each with a few advertised addresses.
const MaxControllers = 16

// MaxBusURL caps the length of one of them.
const MaxBusURL = 256

// CheckControllers refuses a list of controllers' bus URLs that a host
// must not take as the addresses it reconnects to: none, more than
// MaxControllers, or one that is not a nats:// or tls:// URL of a host
// and a port (nothing else: no user, path, query or fragment) of at most
// MaxBusURL bytes.
func CheckControllers(urls []string) error {
	if len(urls) == 0 {
		return fmt.Errorf("no controller's bus URL")
	}
	if len(urls) > MaxControllers {
		return fmt.Errorf("%d controllers' bus URLs, over the %d cap", len(urls), MaxControllers)
	}
	for _, u := range urls {
		if err := checkBusURL(u); err != nil {
			return err
		}
	}
	return nil
}

// checkBusURL refuses one bus URL as CheckControllers says.
func checkBusURL(s string) error {
	if len(s) > MaxBusURL {
		return fmt.Errorf("a bus URL of %d bytes, over the %d cap", len(s), MaxBusURL)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("bus URL %q: %w", s, err)
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return fmt.Errorf("bus URL %q: want nats:// or tls://", s)
	}
	if u.Opaque != "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return fmt.Errorf("bus URL %q: want a host and a port alone", s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return fmt.Errorf("bus URL %q: want a host and a port", s)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("bus URL %q: port %q is not from 1 to 65535", s, port)
	}
	return nil
}
