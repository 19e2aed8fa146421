package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// edgeStates are the edges' reports of their public names, the latest of
// each node's, in memory only: a host sends its report again when it
// connects and every spec.EdgeStateEvery, so a controller started again
// learns them within that. Only a node whose last declaration holds an
// edge is kept: each report is bounded (spec.EdgeState.Check), so what is
// kept is bounded by the edges and the roster's public names. Status
// forgets the nodes no longer assigned an edge.
type edgeStates struct {
	base
	refused *refusedHosts

	mu sync.Mutex
	by map[string]keptEdge
	// declared is, per node, whether its last declaration holds an edge,
	// by that declaration's sequence: read again only when it changes.
	declared map[string]declaredEdge
}

// keptEdge is a node's report as kept, and when it came.
type keptEdge struct {
	state spec.EdgeState
	at    time.Time
}

// declaredEdge is whether declaration seq holds an edge.
type declaredEdge struct {
	seq  uint64
	edge bool
}

func newEdgeStates(b base, refused *refusedHosts) *edgeStates {
	return &edgeStates{base: b, refused: refused, by: map[string]keptEdge{}, declared: map[string]declaredEdge{}}
}

// on records what a host reports of its edge. A report that does not
// decode or check, names another node than its subject, comes from a
// host refused, or from a node that was declared no edge, changes
// nothing.
func (e *edgeStates) on(ctx context.Context, m *nats.Msg) {
	node, _, _ := spec.NodeFromSubject(m.Subject)
	var s spec.EdgeState
	if err := spec.Decode(m.Data, &s); err != nil {
		e.log.Warn("edge report refused", "node", node, "err", err)
		return
	}
	if p, refused := e.refused.of(node); refused {
		e.log.Debug("edge report refused", "node", node, "reason", spec.ProtocolRefusal(p, thisController))
		return
	}
	if s.Node != node {
		e.log.Warn("edge report refused: it names another node than its subject", "node", node, "names", spec.Clip(s.Node, 64))
		return
	}
	if err := s.Check(); err != nil {
		e.log.Warn("edge report refused", "node", node, "err", err)
		return
	}
	declared, err := e.declares(ctx, node)
	if err != nil {
		e.log.Error("edge report not kept", "node", node, "err", err)
		return
	}
	if !declared {
		e.log.Debug("edge report ignored: the node is declared no edge", "node", node)
		e.forget(node)
		return
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.by[node] = keptEdge{state: keptEdgeState(s, now), at: now}
}

// declares says whether node's last declaration holds an edge.
func (e *edgeStates) declares(ctx context.Context, node string) (bool, error) {
	d, err := e.db.LastDeclaration(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	known, ok := e.declared[node]
	e.mu.Unlock()
	if ok && known.seq == d.Seq {
		return known.edge, nil
	}
	var kinds struct {
		Resources []struct {
			Kind string `json:"kind"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(d.Body, &kinds); err != nil {
		return false, fmt.Errorf("read node %q's declaration %d: %w", node, d.Seq, err)
	}
	edge := false
	for _, r := range kinds.Resources {
		edge = edge || r.Kind == spec.KindEdge
	}
	e.mu.Lock()
	e.declared[node] = declaredEdge{seq: d.Seq, edge: edge}
	e.mu.Unlock()
	return edge, nil
}

// keptEdgeState is s as the controller keeps it: each error clipped, no
// time of a failure or of the report after now (a host's clock ahead
// makes nothing look newer than it is).
func keptEdgeState(s spec.EdgeState, now time.Time) spec.EdgeState {
	if s.Time.After(now) {
		s.Time = now
	}
	names := make([]spec.EdgeName, len(s.Names))
	for i, n := range s.Names {
		n.Error = spec.Clip(n.Error, spec.MaxEdgeText)
		if n.ErrorAt.After(now) {
			n.ErrorAt = now
		}
		names[i] = n
	}
	s.Names = names
	return s
}

// forget drops node's report.
func (e *edgeStates) forget(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.by, node)
}

// of is the reports of edges, forgetting every other node's.
func (e *edgeStates) of(edges map[string]bool) map[string]keptEdge {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]keptEdge{}
	for node, k := range e.by {
		if !edges[node] {
			delete(e.by, node)
			continue
		}
		out[node] = k
	}
	for node := range e.declared {
		if !edges[node] {
			delete(e.declared, node)
		}
	}
	return out
}

// publicNames adds the roster's public names to status, each with the
// edges serving it: every node assigned an edge and not being removed
// serves every public name. A name an edge holds no valid certificate
// for, or whose certificate expires within CertWarning while its
// renewal fails, is a problem; with no edge at all, names are listed
// and are none.
func (p *statusPass) publicNames(nodes []store.Node) {
	var edges []string
	isEdge := map[string]bool{}
	for _, n := range nodes {
		if !n.Removing.IsZero() {
			continue
		}
		for _, r := range p.g.plans[n.Name].Resources {
			if r.Kind == spec.KindEdge && !isEdge[n.Name] {
				isEdge[n.Name] = true
				edges = append(edges, n.Name)
			}
		}
	}
	sort.Strings(edges)
	reports := p.c.edges.of(isEdge)
	var problems []string
	var failing []spec.PublicStatus
	var fine []spec.PublicStatus
	for _, rt := range p.g.roster.Routes {
		if !rt.Public {
			continue
		}
		ps := spec.PublicStatus{Name: rt.Name, Node: rt.Node, Module: rt.Module, Edges: []spec.PublicEdge{}}
		bad := false
		for _, edge := range edges {
			k, ok := reports[edge]
			pe := publicEdge(rt.Name, edge, k, ok, p.now)
			if pe.Problem != "" {
				bad = true
				problems = append(problems, fmt.Sprintf("public name %s: edge %s %s", rt.Name, edge, pe.Problem))
			}
			ps.Edges = append(ps.Edges, pe)
		}
		if bad {
			failing = append(failing, ps)
		} else {
			fine = append(fine, ps)
		}
	}
	listed := append(failing, fine...)
	if len(listed) > spec.MaxStatusPublic {
		p.res.PublicOmitted = len(listed) - spec.MaxStatusPublic
		listed = listed[:spec.MaxStatusPublic]
	}
	sort.SliceStable(listed, func(i, j int) bool { return listed[i].Name < listed[j].Name })
	p.res.Public = listed
	for i, pr := range problems {
		if i == spec.MaxStatusFailures {
			p.problem("…and %d more public name problem(s): mesh status --json lists them", len(problems)-i)
			break
		}
		p.problem("%s", pr)
	}
}

// publicEdge is name on edge as its report k says (ok: there is one),
// at now, with the problem it is, if any.
func publicEdge(name, edge string, k keptEdge, ok bool, now time.Time) spec.PublicEdge {
	pe := spec.PublicEdge{Edge: edge}
	if !ok {
		pe.State, pe.Problem = "not reported", "has not reported its certificates"
		return pe
	}
	pe.Reported = k.at.UTC()
	var n spec.EdgeName
	found := false
	for _, en := range k.state.Names {
		if en.Name == name {
			n, found = en, true
			break
		}
	}
	if !found {
		pe.State, pe.Problem = "not served", "does not serve it: it runs no edge, or has not taken the roster's names"
		return pe
	}
	pe.State, pe.NotAfter, pe.Error, pe.ErrorAt, pe.Retry = n.State, n.NotAfter, clipStatus(n.Error), n.ErrorAt, n.Retry
	if pe.State == spec.EdgeValid && !now.Before(n.NotAfter) {
		pe.State = spec.EdgeExpired
	}
	failure := ""
	if pe.Error != "" {
		failure = ": " + pe.Error + "; " + retryText(pe.Retry, now)
	}
	switch pe.State {
	case spec.EdgeObtaining:
		pe.Problem = "has no certificate for it yet: being obtained"
	case spec.EdgeFailed:
		pe.Problem = "has no certificate for it" + failure
	case spec.EdgeExpired:
		pe.Problem = fmt.Sprintf("holds a certificate for it that expired %s ago%s", now.Sub(n.NotAfter).Round(time.Minute), failure)
	case spec.EdgeValid:
		if pe.Error != "" && n.NotAfter.Before(now.Add(CertWarning)) {
			pe.Problem = fmt.Sprintf("holds a certificate for it that expires in %s and was not renewed%s", n.NotAfter.Sub(now).Round(time.Minute), failure)
		}
	}
	return pe
}

// retryText says when certmagic tries again.
func retryText(retry, now time.Time) string {
	switch {
	case retry.IsZero():
		return "not tried again until the edge restarts"
	case !retry.After(now):
		return "tried again now"
	}
	return fmt.Sprintf("tried again at %s (in %s)", retry.UTC().Format(time.RFC3339), retry.Sub(now).Round(time.Second))
}
