package web

import (
	"net/http"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// publicView is the public names page: each of the roster's public
// names, the node and module serving it inside the mesh, and its
// certificate on every edge.
type publicView struct {
	Table publicTable
	// Names counts the names listed, Failing those an edge has a problem
	// with, Omitted those status left out.
	Names, Failing, Omitted int
}

// publicTable is public names as a table, one row a name on an edge, at
// Now.
type publicTable struct {
	Rows []publicRow
	Now  time.Time
}

// publicRow is one name on one edge (nil: no edge serves it); First is
// set on a name's first row, which names it.
type publicRow struct {
	Name, Node, Module string
	First              bool
	Edge               *spec.PublicEdge
}

func (p *Pages) public(r *http.Request) (view, error) {
	st, digest, err := p.status(r.Context())
	if err != nil {
		return view{}, err
	}
	v := publicView{Table: tableOfPublic(st.Public, st.Time), Names: len(st.Public), Omitted: st.PublicOmitted}
	for _, ps := range st.Public {
		if publicFailing(ps) {
			v.Failing++
		}
	}
	return view{"Public names", v, digest}, nil
}

// tableOfPublic is public as rows, at now.
func tableOfPublic(public []spec.PublicStatus, now time.Time) publicTable {
	t := publicTable{Now: now}
	for _, ps := range public {
		row := publicRow{Name: ps.Name, Node: ps.Node, Module: ps.Module, First: true}
		if len(ps.Edges) == 0 {
			t.Rows = append(t.Rows, row)
			continue
		}
		for i := range ps.Edges {
			row.Edge = &ps.Edges[i]
			t.Rows = append(t.Rows, row)
			row.First = false
		}
	}
	return t
}

// publicFailing says an edge has a problem with ps.
func publicFailing(ps spec.PublicStatus) bool {
	for _, e := range ps.Edges {
		if e.Problem != "" {
			return true
		}
	}
	return false
}

// publicOf are the public names that touch node: those it serves inside
// the mesh, with every edge, and, when it is an edge, those it holds a
// certificate for, with that edge only.
func publicOf(public []spec.PublicStatus, node string) []spec.PublicStatus {
	var out []spec.PublicStatus
	for _, ps := range public {
		if ps.Node == node {
			out = append(out, ps)
			continue
		}
		mine := ps
		mine.Edges = nil
		for _, e := range ps.Edges {
			if e.Edge == node {
				mine.Edges = append(mine.Edges, e)
			}
		}
		if len(mine.Edges) > 0 {
			out = append(out, mine)
		}
	}
	return out
}
