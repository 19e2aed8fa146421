package broker

// Recorded is how many connections the gate holds on record for the user
// nkey, closed ones it has not yet forgotten included.
func (s *Server) Recorded(nkey string) int {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	if a := s.gate.users[nkey]; a != nil {
		return len(a.conns)
	}
	return 0
}

// PruneAt is pruneAt, for tests.
const PruneAt = pruneAt
