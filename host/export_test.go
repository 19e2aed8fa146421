package host

import "sync/atomic"

// Died is died, for the tests outside the package: what the host's event
// follower records when the engine says a container died.
func (d *Docker) Died(name string) { d.died(name) }

// CountStateWrites counts the state.json writes a makes from now on (call
// it before a runs); fail, when set, fails the write it is given the count
// of instead of writing.
func CountStateWrites(a *Agent, fail func(n int64) error) *atomic.Int64 {
	var n atomic.Int64
	write := a.writeState
	a.writeState = func(dir string, st State) error {
		if fail != nil {
			if err := fail(n.Add(1)); err != nil {
				return err
			}
		} else {
			n.Add(1)
		}
		return write(dir, st)
	}
	return &n
}

// HandledSeq is the highest stream sequence of a republished message a
// handled.
func HandledSeq(a *Agent) uint64 { return a.handledSeq.Load() }

// CountRosterWrites counts the RosterFile writes a makes from now on (call
// it before a runs).
func CountRosterWrites(a *Agent) *atomic.Int64 {
	var n atomic.Int64
	write := a.writeRoster
	a.writeRoster = func(dir string, raw, sig []byte) error {
		n.Add(1)
		return write(dir, raw, sig)
	}
	return &n
}

// CountDecodes counts the declarations a decodes from now on (call it
// before a runs).
func CountDecodes(a *Agent) *atomic.Int64 {
	var n atomic.Int64
	decode := a.decode
	a.decode = func(data []byte, v any) error {
		n.Add(1)
		return decode(data, v)
	}
	return &n
}

// PretendSystem has e hold binaries as a host running goos/goarch would.
func PretendSystem(e *Engine, goos, goarch string) {
	e.services.goos, e.services.goarch = goos, goarch
	e.makeAppliers()
}

// RosterSeqOf is the sequence of the roster a holds.
func RosterSeqOf(a *Agent) uint64 { return a.rosterSeq.Load() }
