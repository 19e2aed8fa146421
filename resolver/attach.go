package resolver

import (
	"fmt"
	"net/netip"
	"slices"
)

// attachment is one Attach that succeeded: the address it serves (as
// bound, so port 0 is the port the kernel gave), the listeners it bound
// (nil when an address already bound served it) and the prefix it allowed.
type attachment struct {
	at    netip.AddrPort
	ls    *listeners
	allow netip.Prefix
}

// Attach serves addr (host:port) too, until Run ends, and answers queries
// from allow besides the sources Config allows. Attaching an address already
// served (by Listen or an earlier Attach) only adds allow. It may be called
// only after Ready; a bind failure is an error naming the address, and
// nothing stays bound.
//
// addr is served as a Listen address is: UDP and TCP on one port, port 0
// taking a free one (Addrs reports it). It counts as served when an address
// bound has the same host (compared unmapped) and port, or is a wildcard of
// its family on its port; a port 0 never is, and binds a new port each time.
// An allow already held is not added twice.
func (s *Server) Attach(addr string, allow netip.Prefix) error {
	return s.attach(addr, allow, nil)
}

// attachHeld attaches the addresses held were bound for, serving their
// sockets; one that cannot be is closed, and the host's Attach binds it
// again. Run allowed their prefixes already: those of the ones not
// attached are taken back.
func (s *Server) attachHeld(held []Held) {
	failed := false
	for _, h := range held {
		if err := s.attach(h.Addr, h.Allow, &h); err != nil {
			s.log.Warn("resolver: an attached address handed over is not served", "addr", h.Addr, "err", err)
			failed = true
		}
	}
	if failed {
		s.attachMu.Lock()
		s.mu.Lock()
		s.allow.Store(s.allowing(s.attached))
		s.mu.Unlock()
		s.attachMu.Unlock()
	}
}

// attach is Attach, serving held's sockets (nil: bound here) for addr.
// held's sockets are closed when addr is not attached with them.
func (s *Server) attach(addr string, allow netip.Prefix, held *Held) (err error) {
	if held != nil {
		defer func() {
			if err != nil {
				closeHeld([]Held{*held})
			}
		}()
	}
	want, dual, err := parseListen(addr)
	if err != nil {
		return fmt.Errorf("resolver attach address %q: %w", addr, err)
	}
	if !allow.IsValid() {
		return fmt.Errorf("resolver attach %s: allowed network %q: not a valid prefix", addr, allow)
	}
	allow = normalPrefix(allow)
	for _, u := range s.cfg.Upstreams {
		if up, err := netip.ParseAddrPort(u); err == nil && asksItself(want, up) {
			return fmt.Errorf("resolver attach %s: is upstream %s (it would ask itself)", addr, u)
		}
	}

	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	s.mu.Lock()
	state, failed, stop := s.state, s.failed, s.stop
	served := false
	for _, b := range s.bound {
		served = served || b.serves(want, dual)
	}
	s.mu.Unlock()
	switch state {
	case runIdle:
		return fmt.Errorf("resolver attach %s: resolver not ready", addr)
	case runEnded:
		return fmt.Errorf("resolver attach %s: resolver stopped", addr)
	}
	if served {
		if held != nil {
			closeHeld([]Held{*held}) // served already, by the sockets bound
		}
		s.mu.Lock()
		if s.state == runServing {
			s.attached = append(s.attached, attachment{at: want, allow: allow})
		}
		s.mu.Unlock()
		s.addAllow(allow)
		return nil
	}

	var handed []Held
	if held != nil {
		handed = []Held{*held}
	}
	ls, err := bindListeners([]string{addr}, handed, s)
	if err != nil {
		return err
	}
	// Allowed before its first query is read, and taken back on failure.
	before := s.addAllow(allow)
	undo := func() {
		shutdown(s.cfg.Timeout, ls)
		s.allow.Store(before)
	}
	started := s.serve(ls, failed)
	for range ls.servers {
		select {
		case <-started:
		case <-stop:
			undo()
			return fmt.Errorf("resolver attach %s: resolver stopped", addr)
		}
	}
	s.mu.Lock()
	if s.state != runServing {
		s.mu.Unlock()
		undo()
		return fmt.Errorf("resolver attach %s: resolver stopped", addr)
	}
	s.attached = append(s.attached, attachment{at: ls.bound[0].ap, ls: ls, allow: allow})
	s.addrs = append(s.addrs, ls.addrs...)
	s.bound = append(s.bound, ls.bound...)
	s.mu.Unlock()
	s.log.Info("resolver attached", "addr", ls.addrs[0], "allow", allow)
	return nil
}

// Detach stops serving addr (host:port), which an earlier Attach added, and
// stops answering the prefixes only Attach calls at addr allowed: the
// addresses it bound are unbound (UDP and TCP) before it returns. addr is
// compared as Attach compares it, after an Attach of port 0 with the port
// bound (as Addrs reports it). An address no Attach added (a Listen address,
// or one never attached) is left as it is, and that is no error; so is any
// address once Run has ended. An address attached while a wildcard attached
// earlier served it goes with that wildcard.
func (s *Server) Detach(addr string) error {
	want, _, err := parseListen(addr)
	if err != nil {
		return fmt.Errorf("resolver detach address %q: %w", addr, err)
	}
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	s.mu.Lock()
	var gone []*listeners
	kept := make([]attachment, 0, len(s.attached))
	for _, a := range s.attached {
		if a.at != want {
			kept = append(kept, a)
		} else if a.ls != nil {
			gone = append(gone, a.ls)
		}
	}
	if len(kept) == len(s.attached) {
		s.mu.Unlock()
		return nil
	}
	s.attached = kept
	for _, ls := range gone {
		s.addrs = slices.DeleteFunc(s.addrs, func(a string) bool { return slices.Contains(ls.addrs, a) })
		s.bound = slices.DeleteFunc(s.bound, func(b boundAddr) bool { return slices.Contains(ls.bound, b) })
	}
	s.allow.Store(s.allowing(kept))
	s.mu.Unlock()
	shutdown(s.cfg.Timeout, gone...)
	s.log.Info("resolver detached", "addr", want.String())
	return nil
}

// allowing is Config's prefixes, and those attached allow.
func (s *Server) allowing(attached []attachment) *[]netip.Prefix {
	allow := slices.Clone(s.cfg.Allow)
	for _, a := range attached {
		if !slices.Contains(allow, a.allow) {
			allow = append(allow, a.allow)
		}
	}
	return &allow
}

// addAllow adds p to the allowed prefixes unless they hold it, swapping in
// a new slice, and returns the one before. The caller holds attachMu.
func (s *Server) addAllow(p netip.Prefix) (before *[]netip.Prefix) {
	before = s.allow.Load()
	if slices.Contains(*before, p) {
		return before
	}
	next := append(slices.Clip(*before), p) // a new array: readers keep theirs
	s.allow.Store(&next)
	return before
}

// allowed says whether a query from a may be answered: loopback (unless
// switched off), the Allow prefixes and those Attach added. It is on every
// query's path: lock-free and allocation-free.
func (s *Server) allowed(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() {
		return false
	}
	if s.loopback && a.IsLoopback() {
		return true
	}
	if a.Zone() != "" {
		a = a.WithZone("")
	}
	for _, p := range *s.allow.Load() {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
