package spec

import (
	"encoding/json"
	"fmt"
	"time"
)

// RosterDeltaHeader marks a message on RosterSubject as a RosterDelta; a
// message without it is a RosterDoc.
const RosterDeltaHeader = "Mesh-Roster-Delta"

// RosterDelta announces roster Seq in a few bytes instead of
// the whole roster: the changes from roster Base, and the controller's
// signature over the RosterDoc they make. A host holding Base (its signed
// bytes' ContentDigest is BaseDigest) applies the changes, encodes the
// RosterDoc (Mesh, Seq, Issued, Expires, Protocol, the names sorted) and
// keeps it only when FullSig verifies over those bytes: what it then holds
// is byte for byte the roster a request would have brought. A host that
// holds another roster, or none (Base 0 names none: the changes are left
// out), asks for the roster in force at a random moment within
// FetchWithinMS, so a fleet does not ask at once: the controller sets the
// window from the roster's size and the number of nodes.
//
// The delta is itself signed (the Mesh-Sig header over its bytes), decoded
// strictly, and judged like a roster message: another mesh's, a sequence
// at or below the one held, expired or issued in the future.
type RosterDelta struct {
	Mesh       string    `json:"mesh"`
	Seq        uint64    `json:"delta_seq"`
	Base       uint64    `json:"base_seq"`
	BaseDigest string    `json:"base_digest,omitempty"`
	Issued     time.Time `json:"issued"`
	Expires    time.Time `json:"expires"`
	Protocol   int       `json:"protocol"`
	// SetNodes and SetRoutes are added or replace the entry of the same
	// key (a node's name; a route's name and node); DropNodes and
	// DropRoutes are removed.
	SetNodes   []RosterNode  `json:"set_nodes,omitempty"`
	DropNodes  []string      `json:"drop_nodes,omitempty"`
	SetRoutes  []RosterRoute `json:"set_routes,omitempty"`
	DropRoutes []RouteKey    `json:"drop_routes,omitempty"`
	// Overlay is the overlay's part of the roster the delta makes, whole
	// (a few bytes): nil, the overlay is off.
	Overlay *RosterOverlay `json:"overlay,omitempty"`
	// Controllers are the controllers' bus URLs of the roster the delta
	// makes, whole (a few hundred bytes at most): none, it carries none.
	Controllers   []string `json:"controllers,omitempty"`
	FullSig       []byte   `json:"full_sig"`
	FetchWithinMS int64    `json:"fetch_within_ms,omitempty"`
}

// RouteKey names one route of a roster: its full name and its node.
type RouteKey struct {
	Name string `json:"name"`
	Node string `json:"node"`
}

// Normalize sorts the roster and makes a missing list an empty one, as the
// controller composes it, so that a roster built by either side from the
// same names encodes to the same bytes.
func (r *Roster) Normalize() {
	r.Sort()
	if r.Nodes == nil {
		r.Nodes = []RosterNode{}
	}
	if r.Routes == nil {
		r.Routes = []RosterRoute{}
	}
}

// Changes are the entries of to that differ from from's and the keys of
// from that to lacks: with them, Apply makes to of from. Both are taken as
// normalized.
func Changes(from, to Roster) (setNodes []RosterNode, dropNodes []string, setRoutes []RosterRoute, dropRoutes []RouteKey) {
	nodes := make(map[string]RosterNode, len(from.Nodes))
	for _, n := range from.Nodes {
		nodes[n.Name] = n
	}
	for _, n := range to.Nodes {
		if was, ok := nodes[n.Name]; !ok || !was.Equal(n) {
			setNodes = append(setNodes, n)
		}
		delete(nodes, n.Name)
	}
	for _, n := range from.Nodes {
		if _, gone := nodes[n.Name]; gone {
			dropNodes = append(dropNodes, n.Name)
		}
	}
	routes := make(map[RouteKey]RosterRoute, len(from.Routes))
	for _, r := range from.Routes {
		routes[RouteKey{r.Name, r.Node}] = r
	}
	for _, r := range to.Routes {
		k := RouteKey{r.Name, r.Node}
		if was, ok := routes[k]; !ok || was != r {
			setRoutes = append(setRoutes, r)
		}
		delete(routes, k)
	}
	for _, r := range from.Routes {
		if k := (RouteKey{r.Name, r.Node}); routes[k] == r {
			dropRoutes = append(dropRoutes, k)
			delete(routes, k)
		}
	}
	return setNodes, dropNodes, setRoutes, dropRoutes
}

// Apply is base's names with d's changes, normalized: what the controller
// signed as roster d.Seq when base was the roster d names.
func (d RosterDelta) Apply(base Roster) Roster {
	nodes := make(map[string]RosterNode, len(base.Nodes)+len(d.SetNodes))
	for _, n := range base.Nodes {
		nodes[n.Name] = n
	}
	for _, n := range d.SetNodes {
		nodes[n.Name] = n
	}
	for _, name := range d.DropNodes {
		delete(nodes, name)
	}
	routes := make(map[RouteKey]RosterRoute, len(base.Routes)+len(d.SetRoutes))
	for _, r := range base.Routes {
		routes[RouteKey{r.Name, r.Node}] = r
	}
	for _, r := range d.SetRoutes {
		routes[RouteKey{r.Name, r.Node}] = r
	}
	for _, k := range d.DropRoutes {
		delete(routes, k)
	}
	out := Roster{Nodes: make([]RosterNode, 0, len(nodes)), Routes: make([]RosterRoute, 0, len(routes)), Overlay: d.Overlay, Controllers: d.Controllers}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, n)
	}
	for _, r := range routes {
		out.Routes = append(out.Routes, r)
	}
	out.Normalize()
	return out
}

// Doc is the roster message d makes of base: the bytes FullSig signs.
func (d RosterDelta) Doc(base Roster) (RosterDoc, []byte, error) {
	doc := RosterDoc{Mesh: d.Mesh, Seq: d.Seq, Issued: d.Issued, Expires: d.Expires, Protocol: d.Protocol, Names: d.Apply(base)}
	raw, err := json.Marshal(doc)
	if err != nil {
		return RosterDoc{}, nil, fmt.Errorf("encode roster %d: %w", d.Seq, err)
	}
	return doc, raw, nil
}

// FetchWithin is the window in which a host asks for the roster in force.
func (d RosterDelta) FetchWithin() time.Duration {
	return time.Duration(max(d.FetchWithinMS, 0)) * time.Millisecond
}
