package mesh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"sort"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

func (c *Controller) hold(ctx context.Context, req spec.HoldRequest) (spec.Empty, error) {
	if err := spec.CheckName("node", req.Node); err != nil {
		return spec.Empty{}, callerError(err.Error())
	}
	var at time.Time
	if req.Hold {
		at = c.cfg.Now()
	}
	err := c.deps.DB.Hold(ctx, req.Node, at, req.Reason)
	if errors.Is(err, store.ErrNotFound) {
		return spec.Empty{}, notFoundError(fmt.Sprintf("no node called %q: mesh node list shows the nodes", req.Node))
	}
	if err != nil {
		return spec.Empty{}, err
	}
	if req.Hold {
		c.log.Info("node held", "node", req.Node, "reason", req.Reason)
	} else {
		c.log.Info("node released", "node", req.Node)
	}
	return spec.Empty{}, nil
}

// status is the whole mesh at a glance, saying no more than is known
// (invariant 7): a node never heard is not current, an idle current node is
// not "not reported", versions are compared for equality only, and the
// all-clear is given only when nothing stands in its way.
func (c *Controller) status(ctx context.Context, _ spec.StatusRequest) (spec.StatusResult, error) {
	now := c.cfg.Now()
	nodes, err := c.deps.DB.Nodes(ctx)
	if err != nil {
		return spec.StatusResult{}, err
	}
	p, err := newStatusPass(ctx, c, now)
	if err != nil {
		return spec.StatusResult{}, err
	}
	for _, n := range nodes {
		if err := p.node(ctx, n); err != nil {
			return spec.StatusResult{}, err
		}
	}
	for _, ns := range p.res.Versions {
		sort.Strings(ns)
	}
	p.publicNames(nodes)
	p.res.AllClear = len(p.res.Problems) == 0 && len(p.res.Nodes) > 0 && p.res.StoreBusy == ""
	return p.res, nil
}

// statusPass is one status answer being made: what each node's line is
// read against, and the answer so far.
type statusPass struct {
	c        *Controller
	now      time.Time
	g        gathered
	meshName string
	certs    map[string][]store.NameCert // the latest of each node's names
	binaries map[string]store.Release
	inForce  store.Roster
	// ov is the overlay, its members and their reports (overlay.go).
	ov  *overlayView
	res spec.StatusResult
}

// newStatusPass reads what every node's line is read against, and the
// mesh's own lines (the roll, a roster pending).
func newStatusPass(ctx context.Context, c *Controller, now time.Time) (*statusPass, error) {
	p := &statusPass{c: c, now: now}
	var err error
	if p.g, err = c.composer.gather(ctx); err != nil {
		return nil, fmt.Errorf("work out what is pending: %w", err)
	}
	m, err := c.deps.DB.Mesh(ctx)
	if err != nil {
		return nil, err
	}
	p.meshName = m.Name
	if p.ov, err = readOverlayView(ctx, c.deps.DB, now); err != nil {
		return nil, err
	}
	latest, err := c.deps.DB.LatestCerts(ctx)
	if err != nil {
		return nil, err
	}
	p.certs = map[string][]store.NameCert{}
	for _, nc := range latest {
		p.certs[nc.Cert.Node] = append(p.certs[nc.Cert.Node], nc)
	}
	p.res = spec.StatusResult{Time: p.now.UTC(), Nodes: []spec.NodeStatus{}, Versions: map[string][]string{}, Problems: []string{},
		Intermediate: ca.SerialOf(c.deps.CA.Intermediate())}
	// Heartbeats the store refuses are the store's failure, not the
	// nodes': said first, and the nodes shown as heard in memory.
	if p.res.StoreBusy = c.beats.storeTrouble(); p.res.StoreBusy != "" {
		p.problem("%s", p.res.StoreBusy)
	}
	if p.binaries, err = c.deps.DB.NodeBinaries(ctx); err != nil {
		return nil, err
	}
	switch r, err := c.deps.DB.RollByID(ctx, 0); {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		shown := rollOf(r)
		p.res.Roll = &shown
		if pr := rollProblem(shown); pr != "" {
			p.problem("%s", pr)
		}
	}
	inForce, pending, err := c.rosters.rosterPending(ctx, p.g.roster)
	if err != nil {
		return nil, err
	}
	p.inForce = inForce
	if pending {
		p.problem("the names every node serves have changed: mesh push sends them (one roster message to every node)")
	}
	// Read once by the gather above, with every node's assignments.
	for _, g := range p.g.grants.orphaned() {
		p.problem("%s holds grant %s of node %s, which provides it no more (orphaned): assign a provider and mesh grant rotate %s %s, or unassign %s",
			spec.GrantConsumerName(g.Module, g.Node), g.Grant, g.Provider, g.Module, g.Node, g.Module)
	}
	return p, nil
}

// problem adds a line to the answer's problems.
func (p *statusPass) problem(format string, args ...any) {
	p.res.Problems = append(p.res.Problems, fmt.Sprintf(format, args...))
}

// node adds n's line, and its problems, to the answer.
func (p *statusPass) node(ctx context.Context, n store.Node) error {
	n.HostVersion = spec.Clip(n.HostVersion, spec.MaxFactText) // as on receipt, whatever the store holds
	st := spec.NodeStatus{Node: n.Name, AppliedSeq: n.AppliedSeq, HostVersion: n.HostVersion, Protocol: n.Protocol,
		ProtocolKnown: n.Protocol == spec.Protocol, Held: !n.Held.IsZero(), HeldReason: n.HeldReason, Failures: []string{},
		HeartbeatMS: n.Heartbeat.Milliseconds()}
	if !n.Removing.IsZero() {
		st.State, st.Heard = "being removed", "-"
		p.problem("%s is only partly removed: mesh node remove %s finishes the removal", n.Name, n.Name)
		p.res.Nodes = append(p.res.Nodes, st)
		return nil
	}
	p.heard(n, &st)
	if b, ok := p.binaries[n.Name]; ok {
		st.Binary = b.Digest
		if fb, ok := fellBack(n, b.Digest, b.Retry); ok {
			p.problem("%s is declared release %s and its launcher gave up on it (%s): it runs %s", n.Name, short(b.Digest), clipStatus(fb.Reason), versionOr(n.HostVersion))
		}
	}
	st.Fallbacks = shownFallbacks(n.Fallbacks, p.now) // as on receipt, whatever the store holds
	last, err := p.state(ctx, n, &st)
	if err != nil {
		return err
	}
	p.pending(n, &st, last)
	failures, err := p.reported(ctx, n, &st)
	if err != nil {
		return err
	}
	// Certificates it holds a name for and did not renew are failures
	// too, listed after the resources'.
	if due := expiringCerts(p.certs[n.Name], namesOf(n.Name, p.g.roster.RoutesOf(n.Name)), p.now); len(due) > 0 {
		failures = append(failures, due...)
		p.problem("%s has %d certificate(s) expiring within a week or expired, not renewed", n.Name, len(due))
	}
	st.Failures = append(st.Failures, capStatus(failures, n.Name)...)
	p.overlayProblems(n, &st)
	if st.Held {
		p.problem("%s is held%s", n.Name, reasonSuffix(n.HeldReason))
	}
	p.res.Nodes = append(p.res.Nodes, st)
	return nil
}

// heard is what n's heartbeats say: when it was last heard (beats.lastHeard),
// its version, the roster it holds and its protocol.
func (p *statusPass) heard(n store.Node, st *spec.NodeStatus) {
	n = p.c.beats.lastHeard(n)
	st.HeartbeatMS = n.Heartbeat.Milliseconds()
	if n.LastHeard.IsZero() {
		st.Heard, st.State = "never", "never heard"
		p.problem("%s has never been heard", n.Name)
		return
	}
	t := n.LastHeard.UTC()
	st.LastHeard = &t
	age := p.now.Sub(n.LastHeard)
	st.Heard = age.Round(time.Second).String() + " ago"
	if Silent(n.LastHeard, p.now, n.Heartbeat) {
		st.Silent = true
		p.problem("%s has not been heard for %s%s", n.Name, age.Round(time.Second), beatsSuffix(n.Heartbeat))
	}
	if n.HostVersion != "" {
		p.res.Versions[n.HostVersion] = append(p.res.Versions[n.HostVersion], n.Name)
	}
	// The roster it said it holds: behind the one in force, it
	// serves older names (a host that has not said is not behind).
	if rosterBehind(n, p.inForce) {
		p.problem("%s serves the names of roster %d, the mesh's are roster %d: it has not taken them", n.Name, n.RosterSeq, p.inForce.Seq)
	}
	if !st.ProtocolKnown {
		p.problem("%s: %s", n.Name, spec.ProtocolRefusal(n.Protocol, thisController))
	}
}

// state is n's state against the last declaration sent to it, which it
// returns (the zero one when none was sent).
func (p *statusPass) state(ctx context.Context, n store.Node, st *spec.NodeStatus) (store.Declaration, error) {
	last, err := p.c.deps.DB.LastDeclaration(ctx, n.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return store.Declaration{}, err
	default:
		st.SentSeq = last.Seq
	}
	if st.Flooding = p.c.beats.flooding(n.Name, p.now); st.Flooding != "" {
		p.problem("%s %s", n.Name, st.Flooding)
	}
	if cl, ok := p.c.claims.claimOf(n.Name); ok {
		p.problem("%s", cl.problem(n.Name))
		if st.State == "" && !cl.believed {
			st.State = "not believed"
		}
	}
	if st.State == "" {
		switch {
		case st.SentSeq == 0:
			st.State = "nothing sent"
		case n.AppliedSeq >= st.SentSeq:
			st.State = "current"
		default:
			st.State = "applying"
			p.problem("%s has not reported applying declaration %d (it applied %d)", n.Name, st.SentSeq, n.AppliedSeq)
		}
	}
	return last, nil
}

// pending is whether n has changes pending: its composition, and the chain
// it holds.
func (p *statusPass) pending(n store.Node, st *spec.NodeStatus, last store.Declaration) {
	// Pending: what the mesh would send now against what it last sent,
	// without the sequence and times.
	if err := p.g.own[n.Name]; err != nil {
		st.Pending, st.PendingWhy = true, err.Error()
		p.problem("%s", err.Error())
	} else if ct := contentFor(p.g.plans[n.Name].Resources, p.g, rosterPlaceholder); differs(ct, last) {
		st.Pending = true
		if err := p.c.wouldNotFit(p.meshName, n.Name, last.Seq+1, ct); err != nil {
			st.PendingWhy = err.Error()
			p.problem("%s", err.Error())
		} else {
			p.problem("%s has changes pending: mesh push %s", n.Name, n.Name)
		}
	}
	// The chain it holds, as its facts say: an older intermediate is
	// pending until a push hands it the new one. Not said is not
	// behind (invariant 7).
	if n.Facts != nil {
		st.Intermediate = spec.Clip(n.Facts.Intermediate, spec.MaxFactText)
	}
	if st.Intermediate != "" && st.Intermediate != p.res.Intermediate {
		st.Pending = true
		p.problem("%s holds intermediate %s, the mesh signs with %s now: mesh push %s hands it the new chain", n.Name, st.Intermediate, p.res.Intermediate, n.Name)
	}
}

// reported is what n's last report says, and its failures.
func (p *statusPass) reported(ctx context.Context, n store.Node, st *spec.NodeStatus) ([]string, error) {
	r, err := p.c.deps.DB.LastReport(ctx, n.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rep spec.Report
	if err := json.Unmarshal(r.Body, &rep); err != nil {
		return nil, fmt.Errorf("read last report of node %q: %w", n.Name, err)
	}
	st.Refused = clipStatus(rep.Refused)
	if rep.Refused != "" {
		p.problem("%s refused declaration %d: %s", n.Name, rep.Seq, st.Refused)
	}
	if rep.Waiting != "" && n.AppliedSeq < rep.Seq {
		p.problem("%s has not applied declaration %d yet: %s", n.Name, rep.Seq, clipStatus(rep.Waiting))
	}
	if rep.Unkept != "" && n.AppliedSeq < rep.Seq {
		p.problem("%s could not keep declaration %d: %s", n.Name, rep.Seq, clipStatus(rep.Unkept))
	}
	failures := failureLines(rep)
	statusNotes(st, n.Name, rep)
	if len(failures) > 0 {
		p.problem("%s failed %d resource(s)", n.Name, len(failures))
	}
	if rep.Omitted > 0 {
		p.problem("%s sent a report larger than the controller keeps: %d result(s) not kept", n.Name, rep.Omitted)
	}
	return failures, nil
}

// shownFallbacks are the fall-backs of fbs that checkFallback takes.
func shownFallbacks(fbs []spec.Fallback, now time.Time) []spec.Fallback {
	var out []spec.Fallback
	for _, f := range fbs {
		if checkFallback(f, now) == nil {
			out = append(out, f)
		}
	}
	return out
}

// clipStatus is a node's text as status shows it: the whole mesh must fit
// one reply, so each text is cut at spec.MaxStatusText (mesh node show has
// it as kept).
func clipStatus(s string) string { return spec.Clip(s, spec.MaxStatusText) }

// failureLines are rep's failures as status lists them (capStatus cuts
// them to spec.MaxStatusFailures).
func failureLines(rep spec.Report) []string {
	var lines []string
	for _, rr := range rep.Results {
		if rr.Outcome == spec.Failed {
			lines = append(lines, clipStatus(rr.Name)+": "+clipStatus(rr.Error))
		}
	}
	return lines
}

// statusNotes lists at most spec.MaxStatusFailures of the notes of rep's
// results that did not fail (a container started again, and why it had
// stopped) in st, the last line counting the rest. They are told, not
// problems.
func statusNotes(st *spec.NodeStatus, node string, rep spec.Report) {
	var lines []string
	for _, rr := range rep.Results {
		if rr.Outcome != spec.Failed && rr.Note != "" {
			lines = append(lines, clipStatus(rr.Name)+": "+clipStatus(rr.Note))
		}
	}
	st.Notes = append(st.Notes, capStatus(lines, node)...)
}

// capStatus is lines cut to spec.MaxStatusFailures, the last line counting
// the rest.
func capStatus(lines []string, node string) []string {
	if len(lines) <= spec.MaxStatusFailures {
		return lines
	}
	return append(lines[:spec.MaxStatusFailures:spec.MaxStatusFailures],
		fmt.Sprintf("…and %d more: mesh node show %s lists them", len(lines)-spec.MaxStatusFailures, node))
}

// beatsSuffix says how often a silent node said it would be heard, if it
// said.
func beatsSuffix(interval time.Duration) string {
	if interval <= 0 {
		return ""
	}
	return " (it sends a heartbeat every " + interval.String() + ")"
}

// contentDigest is the digest of what a declaration holds, without its
// sequence and times: its resources, roster and CA chain. It is recorded
// with each declaration sent, and status compares it with that of what
// would be sent now (so does a push, to send nothing that is held); "" if
// they do not encode. They are encoded into the hash, not into a buffer: a
// send pays for the digest without copying the declaration. The bytes
// hashed are json.NewEncoder(h).Encode(struct{R []spec.Resource; N
// spec.Roster; C string `json:",omitempty"`}{resources, roster, chain})'s,
// the resources streamed one by one, the chain left out when there is
// none. A declaration carries no roster (it names the roster message): its
// digest hashes the zero one, which the digests recorded are made with.
func contentDigest(resources []spec.Resource, roster spec.Roster, chain string) string {
	h := &lessNewline{Hash: sha256.New()}
	h.Write(digestR)
	if err := spec.WriteResources(h.Hash, resources); err != nil {
		return ""
	}
	h.Write(digestN)
	if err := json.NewEncoder(h).Encode(roster); err != nil { // its newline left out
		return ""
	}
	if chain != "" {
		h.Write(digestC)
		if err := json.NewEncoder(h).Encode(chain); err != nil {
			return ""
		}
	}
	h.Hash.Write(digestEnd)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// The parts of contentDigest's encoding around the resources, roster and
// chain.
var digestR, digestN, digestC, digestEnd = []byte(`{"R":`), []byte(`,"N":`), []byte(`,"C":`), []byte("}\n")

// lessNewline hashes what an Encoder writes (one Write a value), less the
// newline it ends with.
type lessNewline struct{ hash.Hash }

func (h *lessNewline) Write(b []byte) (int, error) {
	h.Hash.Write(bytes.TrimSuffix(b, []byte{'\n'}))
	return len(b), nil
}

// differs reports whether ct differs from what last, the declaration last
// sent (its head will do), holds (none sent: differs if there is any
// resource to send), by the digest recorded with it; one recorded before
// the store kept digests is decoded.
func differs(ct content, last store.Declaration) bool {
	if last.Seq == 0 {
		return len(ct.resources) > 0
	}
	sent := last.Content
	if sent == "" {
		var d spec.Declaration
		if err := spec.Decode(last.Body, &d); err != nil {
			return true
		}
		sent = contentOf(d).digest()
	}
	now := ct.digest()
	return now == "" || now != sent
}

// rosterPlaceholder stands for the roster message in force where status
// works out what a push would send: the digest leaves the reference out,
// and its size is that of any reference.
var rosterPlaceholder = &spec.RosterRef{Seq: 1 << 62, Digest: spec.ContentDigest(nil)}

// wouldNotFit says why the declaration a push would send node (numbered
// seq) does not fit under the cap, or nil: encoded as send encodes it.
func (c *Controller) wouldNotFit(mesh, node string, seq uint64, ct content) error {
	now := c.cfg.Now().UTC()
	body, err := json.Marshal(spec.Declaration{Mesh: mesh, Node: node, Seq: seq, Issued: now,
		Expires: now.Add(spec.DefaultExpiry), Protocol: spec.Protocol, Resources: ct.resources, RosterRef: ct.ref, CAChain: ct.chain})
	if err != nil {
		return fmt.Errorf("encode the declaration of node %q: %w", node, err)
	}
	return oversize(node, len(body), ct.resources, spec.Roster{})
}
