package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
)

// ErrRestart ends a run of the mesh whose controllers' peer set changed:
// Run runs it again, its bus in the new set.
var ErrRestart = errors.New("the controllers' peer set changed: the mesh starts again in it")

// runAgain says whether a run that ended with err is run again (its
// peer set changed), and otherwise what Run returns: a stop asked for
// while the peer set changed is a stop, not an error.
func runAgain(ctx context.Context, err error) (bool, error) {
	switch {
	case !errors.Is(err, ErrRestart):
		return false, err
	case ctx.Err() != nil:
		return false, nil
	}
	return true, nil
}

// Run runs the mesh's parts in start order (CA, store, bus, journal,
// resolver, controller, host), each ready before the next starts, until
// ctx ends; then stops them in reverse, the store last. When the
// controllers' peer set changes (a controller joined) it stops them and
// runs them again, the bus in the new set, on the addresses they bound.
func (m *Mesh) Run(ctx context.Context) (err error) {
	defer func() {
		if derr := m.stopDNS(); derr != nil && err == nil && ctx.Err() == nil {
			err = fmt.Errorf("resolver: %w", derr)
		}
	}()
	for {
		err := m.runOnce(ctx)
		if err != nil {
			// Read again: a run may have grown the peer set.
			st, rerr := ReadClusterState(m.cfg.Dir)
			if rerr != nil {
				return errors.Join(err, rerr)
			}
			err = m.recover(ctx, st, err)
		}
		if again, end := runAgain(ctx, err); !again {
			return end
		}
		// The resolver's sockets handed over by a launcher are the
		// launcher's, bound still: it starts this process again with
		// them (spec.ExitRestart).
		if len(m.cfg.Resolver.Held) > 0 {
			return err
		}
		st, err := ReadClusterState(m.cfg.Dir)
		if err != nil {
			return err
		}
		// What was held is bound and let go: each part binds its own
		// address again.
		// A run that ended before it was ready bound nothing of its own:
		// the next binds what the first was given.
		m.cfg.Held, m.cfg.Resolver.Held = Held{}, nil
		if m.addrs.Bus != "" {
			m.cfg.Addrs.Bus, m.cfg.Addrs.HTTP = m.addrs.Bus, m.addrs.HTTP
			m.cfg.Resolver.Listen = []string{m.addrs.DNS}
		}
		if st != nil {
			for _, u := range st.BusURLs() {
				if !slices.Contains(m.cfg.Advertise, u) {
					m.cfg.Advertise = append(m.cfg.Advertise, u)
				}
			}
		}
		m.log.Info("the mesh starts again: the controllers' peer set changed")
	}
}

// follows says whether a controller of this cluster follows the store's
// log and never begins one: one that joined.
func (st *ClusterState) follows() bool { return st != nil && st.BusOnly }

// clustered says whether the bus runs as a server of a cluster: two
// peers or more.
func (st *ClusterState) clustered() bool { return st != nil && len(st.Peers) >= 2 }

// controllers are the bus URLs the roster carries to the hosts: in a
// cluster of two or more, this controller's (advertise) and every peer's;
// none for a controller alone, whose hosts hold its URLs from their
// tokens.
func (st *ClusterState) controllers(advertise []string) []string {
	if !st.clustered() {
		return nil
	}
	urls := slices.Clone(advertise)
	for _, u := range st.BusURLs() {
		if !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	return urls
}

// replicas is how many servers keep the store's log and the declaration
// stream: 3 in a cluster of three controllers or more, else 1.
func (st *ClusterState) replicas() int {
	if st != nil && len(st.Peers) >= 3 {
		return 3
	}
	return 1
}

// joinsOf is what answers controllers' joins in a mesh run with
// --cluster: nil without.
func joinsOf(st *ClusterState, dir string) *clusterJoins {
	if st == nil {
		return nil
	}
	return &clusterJoins{dir: dir, joined: make(chan struct{}, 1)}
}

// controllerJoins is c for the controller: nil when c is.
func (c *clusterJoins) controllerJoins() mesh.ControllerJoins {
	if c == nil {
		return nil
	}
	return c
}

// clusterJoins adds the controllers that join through this one to the
// cluster's state in dir.
type clusterJoins struct {
	dir string
	// bus is the run's bus, once made: a removal asks its JetStream.
	bus    *broker.Server
	joined chan struct{} // a controller joined and heard its answer
	mu     sync.Mutex
}

func (c *clusterJoins) Check(j spec.ControllerJoin) error {
	st, err := ReadClusterState(c.dir)
	if err != nil {
		return err
	}
	return checkJoin(st, j)
}

// Join adds j's server to the peers and seals the shared keys to it. A
// controller whose bus ran alone marks its store put back first: its bus
// runs clustered from its next start, which drops the streams it kept
// alone, and its journal then begins a new log from the store.
func (c *clusterJoins) Join(_ context.Context, node string, j spec.ControllerJoin, to seal.NodePublic) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := ReadClusterState(c.dir)
	if err != nil {
		return "", err
	}
	if err := checkJoin(st, j); err != nil {
		return "", err
	}
	alone := len(st.Peers) < 2
	st.AddPeer(Peer{Server: j.Server, Route: j.Route, Bus: j.Bus, Node: node})
	keys, err := ReadSharedKeys(c.dir, *st)
	if err != nil {
		return "", err
	}
	sealed, err := keys.Seal(to)
	if err != nil {
		return "", err
	}
	if alone {
		mark := filepath.Join(statedir.Controller(c.dir), mesh.PutBackFile)
		if err := os.WriteFile(mark, []byte(time.Now().UTC().Format(time.RFC3339)+" the bus runs clustered\n"), 0o600); err != nil {
			return "", fmt.Errorf("mark the store to begin a new log: %w", err)
		}
	}
	return sealed, WriteClusterState(c.dir, *st)
}

func (c *clusterJoins) Joined(spec.ControllerJoin) {
	select {
	case c.joined <- struct{}{}:
	default:
	}
}

// peersPart is the part of a mesh run with --cluster that keeps its peer
// set: none without.
func (m *Mesh) peersPart(st *ClusterState, bus *broker.Server, keys mesh.Keys, joins *clusterJoins) []part {
	if st == nil {
		return nil
	}
	p := &peerSet{dir: m.cfg.Dir, bus: bus, keys: keys, joins: joins, log: m.log.With("component", "peers"), ready: make(chan struct{})}
	return []part{{"peers", p.Run, p.ready, nil}}
}

// peersKey is the key of the store's log's bucket that holds the
// controllers' peer set, as the last join made it.
const peersKey = "peers"

// peerSet keeps a controller's peer set while its mesh runs: it puts the
// new set (and the servers removed) in the store's log's bucket once a
// controller joined or was removed through this one, and takes a set
// that grew there, one that holds this controller, and the servers
// removed there (a controller down meanwhile takes them at its next
// start); either way the mesh then starts again (ErrRestart), its bus in
// the new set. A peer set read there only grows the one kept: a server
// leaves by the list of the removed alone.
type peerSet struct {
	dir   string
	bus   *broker.Server
	keys  mesh.Keys
	joins *clusterJoins
	log   *slog.Logger
	ready chan struct{}
}

func (p *peerSet) Run(ctx context.Context) error {
	js, err := busConnect(p.bus, p.keys.Full)(ctx)
	if err != nil {
		return err
	}
	defer js.Conn().Close()
	kv, err := js.KeyValue(ctx, journal.DefaultBucket)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open the controllers' peer set: %w", err)
	}
	// A change this controller made and did not put there (its run
	// ended before it could) is put now.
	if err := p.putIfNewer(ctx, kv); err != nil && ctx.Err() == nil {
		p.log.Warn("the peer set kept here was not put for the other controllers", "err", err)
	}
	w, err := kv.WatchFiltered(ctx, []string{peersKey, removedKey})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("watch the controllers' peer set: %w", err)
	}
	defer w.Stop()
	close(p.ready)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.joins.joined:
			// The answer to the join (or the removal) may still be on its
			// way over a route to the asker's server: the bus stopping at
			// once would drop it, and a joiner whose answer is lost finds
			// its token spent.
			t := time.NewTimer(answerGrace)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			return p.tell(ctx, kv)
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if e.Key() == removedKey {
				var removed []string
				if err := json.Unmarshal(e.Value(), &removed); err != nil {
					p.log.Warn("a list of removed controllers that does not read was left", "err", err)
					continue
				}
				changed, err := takeRemoved(p.dir, removed)
				if err != nil {
					return err
				}
				if changed {
					p.log.Info("a controller was removed from the peer set: the mesh starts again without it", "removed", removed)
					return ErrRestart
				}
				continue
			}
			var peers []Peer
			if err := json.Unmarshal(e.Value(), &peers); err != nil {
				p.log.Warn("a peer set that does not read was left", "err", err)
				continue
			}
			grew, err := takePeers(p.dir, peers)
			if err != nil {
				return err
			}
			if grew {
				p.log.Info("the controllers' peer set grew: the mesh starts again in it", "peers", len(peers))
				return ErrRestart
			}
		}
	}
}

// tell puts the peer set a join made in the bucket, for the other
// controllers, then ends the run: ErrRestart.
func (p *peerSet) tell(ctx context.Context, kv jetstream.KeyValue) error {
	st, err := ReadClusterState(p.dir)
	if err != nil {
		return err
	}
	body, err := json.Marshal(st.Peers)
	if err != nil {
		return fmt.Errorf("encode the peer set: %w", err)
	}
	if _, err := kv.Put(ctx, peersKey, body); err != nil {
		p.log.Warn("the peer set was not put for the other controllers: they learn it from the next join", "err", err)
	}
	if len(st.Removed) > 0 {
		removed, err := json.Marshal(st.Removed)
		if err != nil {
			return fmt.Errorf("encode the removed controllers: %w", err)
		}
		if _, err := kv.Put(ctx, removedKey, removed); err != nil {
			p.log.Warn("the removed controllers were not put for the other controllers: they learn them from the next change", "err", err)
		}
	}
	p.log.Info("the peer set changed: the mesh starts again in it", "peers", len(st.Peers))
	return ErrRestart
}

// putIfNewer puts this controller's peer set in the bucket when it holds
// every peer the bucket's does and more, and its removed servers when the
// bucket lacks some: what a join or a removal through it changed.
func (p *peerSet) putIfNewer(ctx context.Context, kv jetstream.KeyValue) error {
	st, err := ReadClusterState(p.dir)
	if err != nil || st == nil {
		return err
	}
	var kept []Peer
	if e, err := kv.Get(ctx, peersKey); err == nil {
		if err := json.Unmarshal(e.Value(), &kept); err != nil {
			return fmt.Errorf("read the peer set kept in the bucket: %w", err)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	grown := len(st.Peers) > len(kept)
	for _, q := range kept {
		if !slices.Contains(st.Removed, q.Server) && !slices.ContainsFunc(st.Peers, func(p Peer) bool { return p.Server == q.Server }) {
			grown = false
		}
	}
	if grown {
		body, err := json.Marshal(st.Peers)
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, peersKey, body); err != nil {
			return err
		}
	}
	if len(st.Removed) == 0 {
		return nil
	}
	var removed []string
	if e, err := kv.Get(ctx, removedKey); err == nil {
		if err := json.Unmarshal(e.Value(), &removed); err != nil {
			return fmt.Errorf("read the removed controllers kept in the bucket: %w", err)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	union := slices.Clone(removed)
	for _, r := range st.Removed {
		if !slices.Contains(union, r) {
			union = append(union, r)
		}
	}
	if len(union) == len(removed) {
		return nil
	}
	body, err := json.Marshal(union)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, removedKey, body)
	return err
}

// answerGrace is how long a controller whose peer set it changed goes on
// before it starts again in the new set, for its answer to cross the
// cluster's routes.
const answerGrace = 2 * time.Second

// removedKey is the key of the log's bucket that holds the servers
// removed from the cluster: a list that only grows.
const removedKey = "peers-removed"

// ErrRemoved is a controller removed from its cluster (mesh cluster
// remove): it does not run again.
var ErrRemoved = errors.New("this controller was removed from its cluster (mesh cluster remove): it does not run again; to make the machine a controller again, remove its directory and join it with a new token")

// CheckNotRemoved is ErrRemoved when the controller kept in dir was
// removed from its cluster, as far as it learnt.
func CheckNotRemoved(dir string) error {
	st, err := ReadClusterState(dir)
	if err != nil || st == nil {
		return err
	}
	if st.removedSelf() {
		return ErrRemoved
	}
	return nil
}

// takeRemoved records removed among the cluster's removed servers in
// dir, and drops them from its peers: whether the peer set changed. This
// controller among them is ErrRemoved, recorded first.
func takeRemoved(dir string, removed []string) (bool, error) {
	st, err := ReadClusterState(dir)
	if err != nil || st == nil {
		return false, err
	}
	n := len(st.Peers)
	added := false
	for _, r := range removed {
		if !slices.Contains(st.Removed, r) {
			st.Removed, added = append(st.Removed, r), true
		}
	}
	st.Peers = slices.DeleteFunc(st.Peers, func(p Peer) bool { return slices.Contains(st.Removed, p.Server) })
	if !added && len(st.Peers) == n {
		return false, nil
	}
	if err := WriteClusterState(dir, *st); err != nil {
		return false, err
	}
	if st.removedSelf() {
		return false, ErrRemoved
	}
	return len(st.Peers) != n, nil
}

// takePeers records peers as the cluster's peer set in dir when it holds
// this controller and every peer kept, and more: whether it did.
func takePeers(dir string, peers []Peer) (bool, error) {
	st, err := ReadClusterState(dir)
	if err != nil || st == nil {
		return false, err
	}
	peers = slices.DeleteFunc(slices.Clone(peers), func(p Peer) bool { return slices.Contains(st.Removed, p.Server) })
	has := func(server string) bool {
		return slices.ContainsFunc(peers, func(p Peer) bool { return p.Server == server })
	}
	if !has(st.Server) || len(peers) <= len(st.Peers) {
		return false, nil
	}
	for _, q := range st.Peers {
		if !has(q.Server) {
			return false, nil
		}
	}
	st.Peers = peers
	return true, WriteClusterState(dir, *st)
}
