package host

import (
	"math/rand/v2"
	"slices"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// controllersOf is the bus URLs the host is to reconnect to as the roster
// doc carries them, and whether it carries any it may take: a list that
// spec.CheckControllers refuses, or none (a mesh of one controller), is
// no list, and the host keeps the addresses it has.
func controllersOf(doc spec.RosterDoc) ([]string, error) {
	urls := doc.Names.Controllers
	if len(urls) == 0 {
		return nil, nil
	}
	if err := spec.CheckControllers(urls); err != nil {
		return nil, err
	}
	return urls, nil
}

// takeControllers makes the controllers' bus URLs the roster doc carries
// the bus addresses of the host: kept in state.json, which the next start
// dials, and handed to the live connection nc, which reconnects to them
// when its server goes (the server it is on stays until then). The pool is
// shuffled, so a fleet whose controller stops does not all reconnect to
// the same next one. A list refused, none, or the one held changes
// nothing; nor does any on a controller's own machine (KeepBus).
func (a *Agent) takeControllers(nc *nats.Conn, doc spec.RosterDoc) {
	if a.cfg.KeepBus {
		return
	}
	urls, err := controllersOf(doc)
	if err != nil {
		a.log.Warn("the roster's controllers' bus URLs are not taken: the host keeps those it has", "roster_seq", doc.Seq, "err", err)
		return
	}
	if urls == nil || slices.Equal(urls, a.state.Bus) {
		return
	}
	was := a.state.Bus
	a.state.Bus = slices.Clone(urls)
	if err := a.save(a.state); err != nil {
		// Held in memory: the next write of the state keeps them.
		a.log.Warn("the controllers' bus URLs are not kept for the next start", "err", err)
	}
	pool := slices.Clone(urls)
	rand.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	if err := nc.SetServerPool(pool); err != nil {
		a.log.Warn("the controllers' bus URLs are not handed to the bus connection: its next start dials them", "err", err)
		return
	}
	a.log.Info("the controllers' bus URLs taken", "bus", urls, "was", was)
}
