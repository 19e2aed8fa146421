package spec

import "sort"

// Domain is the mesh's own domain: NODE.internal, ROUTE.NODE.internal.
const Domain = "internal"

// Roster is every name of the mesh: each node, each route and each public
// name served inside it. It travels in every declaration, outside the
// resources, and the host's resolver answers from it; nothing copies it into
// a container.
type Roster struct {
	Nodes  []RosterNode  `json:"nodes"`
	Routes []RosterRoute `json:"routes"`
}

// RosterNode is NODE.internal.
type RosterNode struct {
	Name    string `json:"name"` // the node's name; its address is NAME.internal
	Address string `json:"address"`
}

// RosterRoute is a routed name: ROUTE.NODE.internal, or a public name served
// by NODE (split horizon).
type RosterRoute struct {
	Name    string `json:"name"` // the full name
	Node    string `json:"node"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	Module  string `json:"module"`
	Public  bool   `json:"public,omitempty"`
}

// RouteName is the internal name of route on node.
func RouteName(route, node string) string { return route + "." + node + "." + Domain }

// NodeName is the internal name of node.
func NodeName(node string) string { return node + "." + Domain }

// Sort puts the roster in its one order, so equal rosters are equal bytes.
func (r *Roster) Sort() {
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Name < r.Nodes[j].Name })
	sort.Slice(r.Routes, func(i, j int) bool {
		a, b := r.Routes[i], r.Routes[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Node < b.Node
	})
}

// RoutesOf are the routes node serves.
func (r Roster) RoutesOf(node string) []RosterRoute {
	var out []RosterRoute
	for _, rt := range r.Routes {
		if rt.Node == node {
			out = append(out, rt)
		}
	}
	return out
}
