package host

import (
	"runtime"
	"sync"
	"weak"
)

// RosterPool shares the rosters that the hosts of one process hold, one
// copy for each content digest. The simulated hosts of the fleet
// benchmark's one process, each holding the roster and its decoded form,
// would hold O(fleet²) memory that the machines they stand for hold once
// each; a real host has the pool's nil, and holds its own. A roster held is never
// changed (a new one replaces it), so the hosts sharing one never see
// another's change. An entry lasts while some host holds its roster.
type RosterPool struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[heldRoster]
}

// share is the roster held under r's digest, when some host holds it, or
// r, kept for the next. A nil pool shares nothing.
func (p *RosterPool) share(r *heldRoster) *heldRoster {
	if p == nil {
		return r
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.m[r.digest].Value(); h != nil {
		return h
	}
	if p.m == nil {
		p.m = make(map[string]weak.Pointer[heldRoster])
	}
	w := weak.Make(r)
	p.m[r.digest] = w
	runtime.AddCleanup(r, p.forget, poolEntry{r.digest, w})
	return r
}

type poolEntry struct {
	digest string
	w      weak.Pointer[heldRoster]
}

// forget drops e once its roster is collected, unless the digest was
// shared again since.
func (p *RosterPool) forget(e poolEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[e.digest] == e.w {
		delete(p.m, e.digest)
	}
}

// size is how many rosters the pool holds an entry for.
func (p *RosterPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
