package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// The overlay's membership is part of the roster: each node on it carries
// its WireGuard key, overlay address, endpoints and relay flag, and with
// the overlay on every node's and route's address is its overlay address.
// A change of membership (a join, a node's endpoints or relay flag, a
// removal, the overlay turned on or off) is one roster message, never a
// declaration.

// membershipDelay is the least time between two roster messages sent for
// changes of membership: the first change is sent at once (a joined host's
// first packet waits on it), and the changes that come within the delay
// after it are one message at its end.
const membershipDelay = time.Second

// overlays is the overlay's concern on the controller: its verbs, its
// view, and the roster sent when its membership changed, at once and at
// most once a delay.
type overlays struct {
	base
	delay time.Duration
	kick  chan struct{}
	// send composes the roster and sends it if it changed (sendNames).
	send func(ctx context.Context) (*spec.PushRoster, error)
}

// changed asks for the roster to be sent within the delay.
func (m *overlays) changed() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// sendLoop sends the roster for each change, at most once a delay: a
// change within the delay of the last message waits out the rest of it,
// and every change made meanwhile goes with it.
func (m *overlays) sendLoop(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		}
		if wait := m.delay - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		// A change told from here on is after the gather below starts: it
		// stays in kick and is sent next.
		select {
		case <-m.kick:
		default:
		}
		m.sendOnce(ctx)
		last = time.Now()
	}
}

// sendOnce sends the roster, its failure logged, its panic caught. A
// roster that cannot be composed is not sent (invariant 1): every host
// keeps the peers it has until the next change or push.
func (m *overlays) sendOnce(ctx context.Context) {
	defer m.guard.catch("overlay membership", nil)
	r, err := m.send(ctx)
	if err != nil {
		m.log.Error("roster not sent after a change of the overlay's membership: every host keeps its peers", "err", err)
		return
	}
	if r != nil {
		m.log.Info("roster sent for a change of the overlay's membership", "seq", r.Seq, "nodes", r.Nodes)
	}
}

// enable turns the overlay on with req.CIDR, gives every node with
// a key an address and sends the roster.
func (m *overlays) enable(ctx context.Context, req spec.OverlayEnableRequest) (spec.OverlayEnableResult, error) {
	cidr, err := spec.CheckOverlayCIDR(req.CIDR)
	if err != nil {
		return spec.OverlayEnableResult{}, callerError(err.Error())
	}
	given, err := m.db.EnableOverlay(ctx, cidr, m.now())
	var on *store.OverlayOnError
	if errors.As(err, &on) {
		return spec.OverlayEnableResult{}, refusedError(fmt.Sprintf("the overlay is on with range %s, not %s: mesh overlay disable first (every node then changes address)", on.CIDR, cidr))
	}
	if err != nil {
		return spec.OverlayEnableResult{}, err
	}
	m.log.Info("overlay on", "cidr", cidr.String(), "given", given)
	res := spec.OverlayEnableResult{CIDR: cidr.String(), Given: given}
	res.Roster, res.NamesKept = m.sendNow(ctx)
	return res, nil
}

// disable turns the overlay off and sends the roster, which takes
// every host's interface down.
func (m *overlays) disable(ctx context.Context, _ spec.OverlayDisableRequest) (spec.OverlayDisableResult, error) {
	was, err := m.db.DisableOverlay(ctx)
	if err != nil {
		return spec.OverlayDisableResult{}, err
	}
	m.log.Info("overlay off", "was", was)
	res := spec.OverlayDisableResult{Was: was}
	res.Roster, res.NamesKept = m.sendNow(ctx)
	return res, nil
}

// sendNow sends the roster at once for a change a verb made, and
// says, when it could not, what every host keeps.
func (m *overlays) sendNow(ctx context.Context) (*spec.PushRoster, string) {
	r, err := m.send(ctx)
	if err != nil {
		m.log.Error("roster not sent after a change of the overlay", "err", err)
		return nil, fmt.Sprintf("the roster was not sent (%v): every host keeps the names and peers it has until the next mesh push", err)
	}
	return r, ""
}

// show is the overlay's range and its members after req.After, as
// many as fit one reply.
func (m *overlays) show(ctx context.Context, req spec.OverlayShowRequest) (spec.OverlayShowResult, error) {
	now := m.now()
	res := spec.OverlayShowResult{Time: now.UTC(), Members: []spec.NodeOverlay{}}
	ov, err := readOverlayView(ctx, m.db, now)
	if err != nil {
		return spec.OverlayShowResult{}, err
	}
	if !ov.on.On() {
		return res, nil
	}
	res.CIDR = ov.on.CIDR
	enabled := ov.on.Enabled.UTC()
	res.Enabled = &enabled
	size := replyOverhead
	for _, n := range ov.members {
		if n.Name <= req.After {
			continue
		}
		v := ov.of(n)
		b, err := json.Marshal(v)
		if err != nil {
			return spec.OverlayShowResult{}, fmt.Errorf("encode the overlay of node %q: %w", n.Name, err)
		}
		if size += len(b) + 1; size > spec.MaxReply && len(res.Members) > 0 {
			res.Next = res.Members[len(res.Members)-1].Node
			break
		}
		res.Members = append(res.Members, v)
	}
	return res, nil
}

// onOverlay records what a host reports of its overlay: its mode,
// endpoints, relay flag and peers' paths. A report that changes the
// roster (a member's endpoints or relay flag) is a change of membership.
func (c *Controller) onOverlay(ctx context.Context, m *nats.Msg) {
	node, _, _ := spec.NodeFromSubject(m.Subject)
	var s spec.OverlayState
	if err := spec.Decode(m.Data, &s); err != nil {
		c.log.Warn("overlay report refused", "node", node, "err", err)
		return
	}
	if p, refused := c.refused.of(node); refused {
		c.log.Debug("overlay report refused", "node", node, "reason", spec.ProtocolRefusal(p, thisController))
		return
	}
	if s.Node != node {
		c.log.Warn("overlay report refused: it names another node than its subject", "node", node, "names", spec.Clip(s.Node, 64))
		return
	}
	if err := s.Check(); err != nil {
		c.log.Warn("overlay report refused", "node", node, "err", err)
		return
	}
	now := c.cfg.Now()
	s = keptOverlayState(s, now)
	changed, err := c.deps.DB.RecordOverlayState(ctx, s, now)
	if err != nil {
		c.log.Error("overlay report not recorded", "node", node, "err", err)
		return
	}
	if changed {
		c.log.Info("overlay membership changed", "node", node, "endpoints", s.Endpoints, "relay", s.Relay)
		c.overlays.changed()
	}
}

// keptOverlayState is s as the controller keeps it: its texts clipped, no
// time after now (a host's clock ahead makes no path look fresh for
// longer than it is), no peer named twice.
func keptOverlayState(s spec.OverlayState, now time.Time) spec.OverlayState {
	s.Error = spec.Clip(s.Error, spec.MaxStatusText)
	if s.Time.After(now) {
		s.Time = now
	}
	seen := make(map[string]bool, len(s.Peers))
	peers := make([]spec.OverlayPath, 0, len(s.Peers))
	for _, p := range s.Peers {
		if seen[p.Node] {
			continue
		}
		seen[p.Node] = true
		p.Endpoint = spec.Clip(p.Endpoint, 64)
		if p.Handshake.After(now) {
			p.Handshake = now
		}
		peers = append(peers, p)
	}
	s.Peers = peers
	return s
}

// overlayView is the overlay as the operator's views show it: its range,
// its members and what each reported.
type overlayView struct {
	on      store.Overlay
	now     time.Time
	members []store.Node // on the overlay, not being removed, by name
	reports map[string]store.OverlayReport
}

// readOverlayView reads the overlay, its members and their reports. A
// read that fails is an error, never an overlay off or a member without
// paths.
func readOverlayView(ctx context.Context, db Store, now time.Time) (*overlayView, error) {
	on, err := db.Overlay(ctx)
	if err != nil {
		return nil, err
	}
	ov := &overlayView{on: on, now: now}
	if !on.On() {
		return ov, nil
	}
	nodes, err := db.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	ov.members = overlayMembers(nodes)
	if ov.reports, err = db.OverlayReports(ctx); err != nil {
		return nil, err
	}
	return ov, nil
}

// overlayMembers are the nodes of nodes on the overlay: with a key and an
// address, and no removal begun.
func overlayMembers(nodes []store.Node) []store.Node {
	var out []store.Node
	for _, n := range nodes {
		if n.WGKey != "" && n.OverlayIP != "" && n.Removing.IsZero() {
			out = append(out, n)
		}
	}
	return out
}

// of is member n as the views show it.
func (ov *overlayView) of(n store.Node) spec.NodeOverlay {
	v := spec.NodeOverlay{Node: n.Name, IP: n.OverlayIP, Key: n.WGKey, Endpoints: n.Endpoints, Relay: n.Relay, Mode: n.OverlayMode}
	if r, ok := ov.reports[n.Name]; ok && !r.At.IsZero() {
		at := r.At.UTC()
		v.Reported = &at
		v.Error = r.State.Error
		v.Peers = r.State.Peers
	}
	v.Stale = ov.stale(n)
	return v
}

// stale are the members whose path from n has had no handshake for
// spec.OverlayStale: the last handshake n reported with the peer is older,
// or there was none since both were on the overlay that long ago.
func (ov *overlayView) stale(n store.Node) []string {
	paths := map[string]spec.OverlayPath{}
	for _, p := range ov.reports[n.Name].State.Peers {
		paths[p.Node] = p
	}
	var out []string
	for _, peer := range ov.members {
		if peer.Name == n.Name {
			continue
		}
		since := ov.on.Enabled
		for _, t := range []time.Time{n.Joined, peer.Joined} {
			if t.After(since) {
				since = t
			}
		}
		if p, ok := paths[peer.Name]; ok && p.Handshake.After(since) {
			since = p.Handshake
		}
		if ov.now.Sub(since) > spec.OverlayStale {
			out = append(out, peer.Name)
		}
	}
	return out
}

// overlayProblems adds to status what n's overlay says: its peers without
// a handshake for spec.OverlayStale (a failure naming both nodes), and
// the error its host reported.
func (p *statusPass) overlayProblems(n store.Node, st *spec.NodeStatus) {
	if p.ov == nil || !p.ov.on.On() || n.WGKey == "" || n.OverlayIP == "" {
		return
	}
	var failures []string
	if r, ok := p.ov.reports[n.Name]; ok && r.State.Error != "" {
		failures = append(failures, "overlay: "+clipStatus(r.State.Error))
		p.problem("%s's overlay is not up as the roster says: %s", n.Name, clipStatus(r.State.Error))
	}
	stale := p.ov.stale(n)
	for _, peer := range stale {
		failures = append(failures, fmt.Sprintf("overlay: no handshake with %s for over %s", peer, spec.OverlayStale))
	}
	if len(stale) > 0 {
		shown := stale
		more := ""
		if len(shown) > spec.MaxStatusFailures {
			shown, more = shown[:spec.MaxStatusFailures], fmt.Sprintf(" and %d more", len(stale)-spec.MaxStatusFailures)
		}
		p.problem("%s has had no overlay handshake for over %s with %v%s: mesh node show %s gives its paths", n.Name, spec.OverlayStale, shown, more, n.Name)
	}
	st.Failures = append(st.Failures, capStatus(failures, n.Name)...)
}

// addTo adds n's overlay to its view, when the overlay is on and n
// is on it. A read that fails is an error, never a node off the overlay.
func (m *overlays) addTo(ctx context.Context, n store.Node, v *spec.Node) error {
	if n.WGKey == "" || n.OverlayIP == "" || !n.Removing.IsZero() {
		return nil
	}
	ov, err := readOverlayView(ctx, m.db, m.now())
	if err != nil {
		return err
	}
	if !ov.on.On() {
		return nil
	}
	o := ov.of(n)
	v.Overlay = &o
	return nil
}
