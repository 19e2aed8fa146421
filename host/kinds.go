package host

import (
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
)

// kindOrder is the order the host applies the kinds it holds in, one line
// a kind; removals go in the reverse order. Each kind is spec/<kind>.go and
// host/<kind>.go; this list places it.
//
// A line that begins a stage starts what is applied after every kind
// above it: what a later stage uses is held by an earlier one (files and
// directories, then the node's network, then the containers that mount the
// one and join the other, then the binary, last so that what the node
// declares besides is in place when its launcher starts a new version).
// Within a stage, resources go parents first (by path depth; a kind whose
// target is a name is at depth 0). At one depth, a kind placed after the
// lines above it goes after them (a directory before a file); one placed
// with the line above goes beside it, by path.
var kindOrder = []kindPlace{
	{stage, spec.KindDirectory},
	{after, spec.KindFile},
	{with, spec.KindCertificate},
	{after, spec.KindTrust},
	{stage, spec.KindNetwork},
	{stage, spec.KindContainer},
	{after, spec.KindEdge},
	{stage, spec.KindBinary},
}

// kindPlace is one line of kindOrder: a kind and where it goes against the
// line above.
type kindPlace struct {
	rel  placement
	kind string
}

// placement is where a line of kindOrder goes against the line above.
type placement int

const (
	// stage: after every kind above.
	stage placement = iota
	// after: in the stage above, after it at one path depth.
	after
	// with: in the stage above, beside it at one path depth.
	with
)

// order is where a kind's resources go: by phase (its stage), then by
// path depth, then by rank (its place at one depth).
type order struct{ phase, rank int8 }

// kindOrders are the places of kindOrder, by kind.
var kindOrders = orders(kindOrder)

// orders numbers the stages of lines and the places within each.
func orders(lines []kindPlace) map[string]order {
	out := make(map[string]order, len(lines))
	var o order
	for i, l := range lines {
		switch {
		case i == 0:
		case l.rel == stage:
			o = order{phase: o.phase + 1}
		case l.rel == after:
			o.rank++
		}
		if _, dup := out[l.kind]; dup {
			panic(fmt.Sprintf("host: kind %q placed twice in kindOrder", l.kind))
		}
		out[l.kind] = o
	}
	return out
}

// orderOf is where resources of kind go; a kind kindOrder does not place
// goes with the last line of the first stage.
func orderOf(kind string) order {
	if o, ok := kindOrders[kind]; ok {
		return o
	}
	var last order
	for _, l := range kindOrder {
		if o := kindOrders[l.kind]; o.phase == 0 {
			last = o
		}
	}
	return last
}

// factsMoved has the facts sent again when results created, changed or
// removed a resource of a kind the facts report (hostKind.facts), so that
// they follow within seconds, not at the next daily facts.
func (a *Agent) factsMoved(results []spec.ResourceResult) {
	for _, r := range results {
		if hostKinds[r.Kind].facts == nil {
			continue
		}
		if r.Outcome == spec.Created || r.Outcome == spec.Changed || r.Outcome == spec.Removed {
			nudge(a.factsNow)
			return
		}
	}
}

// kindFacts has each kind that reports facts (hostKind.facts) fill its
// part of f, with e's services, held the resources of the declaration the
// host holds.
func (e *Engine) kindFacts(held []spec.Resource, f *spec.Facts) {
	for _, l := range kindOrder {
		if k := hostKinds[l.kind]; k.facts != nil {
			k.facts(&e.services, held, f)
		}
	}
}
