package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// fleetView is the fleet page: status's verdict, what stands in its way,
// the version split and the roll.
type fleetView struct {
	Status   spec.StatusResult
	Problems []problemLine
	Versions []versionLine
	Silent   int
	// Public counts the public names, and PublicFailing those an edge
	// has a problem with.
	Public, PublicFailing int
	// Extra are the sections of status's answer no page has a place of
	// its own for, shown as tables.
	Extra []section
}

// versionLine is one host version and the nodes running it.
type versionLine struct {
	Version string
	Nodes   []string
}

func (p *Pages) fleet(r *http.Request) (view, error) {
	st, digest, err := p.status(r.Context())
	if err != nil {
		return view{}, err
	}
	v := fleetView{Status: st, Versions: versions(st), Extra: extraSections(st)}
	names := make([]string, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		names = append(names, n.Node)
		if n.Silent {
			v.Silent++
		}
	}
	for _, pr := range st.Problems {
		v.Problems = append(v.Problems, problemParts(pr, names))
	}
	v.Public = len(st.Public) + st.PublicOmitted
	for _, ps := range st.Public {
		if publicFailing(ps) {
			v.PublicFailing++
		}
	}
	return view{"Fleet", v, digest}, nil
}

// versions is status's version split, by version.
func versions(st spec.StatusResult) []versionLine {
	var out []versionLine
	for _, ver := range slices.Sorted(maps.Keys(st.Versions)) {
		out = append(out, versionLine{Version: ver, Nodes: st.Versions[ver]})
	}
	return out
}

// nodeRow is one node of the nodes page: status's line for it, with its
// architecture and its overlay address and paths.
type nodeRow struct {
	spec.NodeStatus
	Arch    string
	Overlay *spec.NodeOverlay
	// AgeMS is how long ago it was heard when the page was made; -1
	// when never.
	AgeMS int64
}

// nodesView is the nodes page.
type nodesView struct {
	Rows     []nodeRow
	Versions []versionLine
	Overlay  string // the overlay's range; empty when off
}

func (p *Pages) nodes(r *http.Request) (view, error) {
	ctx := r.Context()
	st, digest, err := p.status(ctx)
	if err != nil {
		return view{}, err
	}
	list, err := p.src.Nodes(ctx)
	if err != nil {
		return view{}, err
	}
	ov, err := p.src.Overlay(ctx)
	if err != nil {
		return view{}, err
	}
	arch := map[string]string{}
	for _, n := range list {
		if n.Facts != nil {
			arch[n.Name] = n.Facts.Arch
		}
	}
	members := map[string]*spec.NodeOverlay{}
	for i := range ov.Members {
		members[ov.Members[i].Node] = &ov.Members[i]
	}
	v := nodesView{Versions: versions(st), Overlay: ov.CIDR}
	for _, n := range st.Nodes {
		v.Rows = append(v.Rows, nodeRow{NodeStatus: n, Arch: arch[n.Node], Overlay: members[n.Node], AgeMS: ageMS(n.LastHeard, st.Time)})
	}
	return view{"Nodes", v, digest}, nil
}

// ageMS is how long before now at was, in milliseconds; -1 for never.
func ageMS(at *time.Time, now time.Time) int64 {
	if at == nil {
		return -1
	}
	return max(now.Sub(*at).Milliseconds(), 0)
}

// nodeView is a node's page.
type nodeView struct {
	Node   spec.Node
	Status *spec.NodeStatus
	AgeMS  int64
	// Certs are the latest leaf for each set of names the node was
	// issued, soonest to expire first.
	Certs  []spec.IssuedCert
	Grants []spec.GrantInfo
	// Public are the public names it serves inside the mesh, and those
	// it holds a certificate for as an edge.
	Public publicTable
	Now    time.Time
}

func (p *Pages) node(r *http.Request) (view, error) {
	ctx := r.Context()
	name := r.PathValue("name")
	if err := spec.CheckName("node", name); err != nil {
		return view{}, errNotFound(err.Error())
	}
	// Status, and with it the digest, first: facts recorded between
	// the two reads make the page's stream say "change".
	st, digest, err := p.status(ctx)
	if err != nil {
		return view{}, err
	}
	n, err := p.src.Node(ctx, name)
	if err != nil {
		return view{}, err
	}
	v := nodeView{Node: n, Now: st.Time, AgeMS: -1, Public: tableOfPublic(publicOf(st.Public, name), st.Time)}
	for i := range st.Nodes {
		if st.Nodes[i].Node == name {
			v.Status = &st.Nodes[i]
			v.AgeMS = ageMS(st.Nodes[i].LastHeard, st.Time)
		}
	}
	certs, err := p.src.Certs(ctx, name)
	if err != nil {
		return view{}, err
	}
	v.Certs = latestCerts(certs)
	grants, err := p.src.Grants(ctx)
	if err != nil {
		return view{}, err
	}
	for _, g := range grants {
		if g.Node == name || g.Provider == name {
			v.Grants = append(v.Grants, g)
		}
	}
	return view{"Node " + name, v, digest}, nil
}

// latestCerts keeps the latest leaf issued for each set of names, soonest
// to expire first.
func latestCerts(certs []spec.IssuedCert) []spec.IssuedCert {
	latest := map[string]spec.IssuedCert{}
	for _, c := range certs {
		key := strings.Join(c.Names, ",")
		if old, ok := latest[key]; !ok || c.Issued.After(old.Issued) {
			latest[key] = c
		}
	}
	out := slices.Collect(maps.Values(latest))
	slices.SortFunc(out, func(a, b spec.IssuedCert) int {
		return cmp.Or(a.NotAfter.Compare(b.NotAfter), cmp.Compare(a.Serial, b.Serial))
	})
	return out
}

func (p *Pages) modules(r *http.Request) (view, error) {
	mods, err := p.src.Modules(r.Context())
	if err != nil {
		return view{}, err
	}
	return view{"Modules", mods, ""}, nil
}

// activityView is the pushes and rolls page: the audit's, newest first.
type activityView struct {
	Entries []spec.AuditEntry
	Since   time.Time
	Roll    *spec.Roll
}

// activityVerbs are the calls the activity page lists.
var activityVerbs = []string{spec.Push.Name, spec.ReleaseRoll.Name, spec.RollResume.Name, spec.RollAbort.Name,
	spec.Assign.Name, spec.Unassign.Name, spec.ModuleRegister.Name, spec.ModuleRemove.Name}

// activityWindow is how far back the activity page reads the audit, and
// activityMax how many entries it shows.
const (
	activityWindow = 30 * 24 * time.Hour
	activityMax    = 200
)

func (p *Pages) activity(r *http.Request) (view, error) {
	ctx := r.Context()
	since := p.now().Add(-activityWindow)
	es, err := p.src.Audit(ctx, since)
	if err != nil {
		return view{}, err
	}
	st, digest, err := p.status(ctx)
	if err != nil {
		return view{}, err
	}
	v := activityView{Since: since.UTC(), Roll: st.Roll}
	for i := len(es) - 1; i >= 0 && len(v.Entries) < activityMax; i-- {
		if slices.Contains(activityVerbs, es[i].Verb) {
			v.Entries = append(v.Entries, es[i])
		}
	}
	return view{"Pushes and rolls", v, digest}, nil
}

// section is a part of status's answer shown as a table: its name, its
// columns and its rows' cells, as text.
type section struct {
	Name    string
	Columns []string
	Rows    [][]string
}

// knownStatus are status's fields the pages show in places of their own.
var knownStatus = []string{"time", "nodes", "versions", "all_clear", "problems", "intermediate", "roll", "store_busy", "public", "public_omitted"}

// extraSections are the fields of st the fleet page has no place for, as
// tables: a list of objects is a table of their fields, anything else one
// cell. Read through JSON, so a field status gains is shown without this
// package knowing its type.
func extraSections(st spec.StatusResult) []section {
	b, err := json.Marshal(st)
	if err != nil {
		return nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return nil
	}
	var out []section
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if slices.Contains(knownStatus, name) {
			continue
		}
		out = append(out, tableOf(strings.ReplaceAll(name, "_", " "), fields[name]))
	}
	return out
}

// tableOf is raw as a section: its objects' fields the columns.
func tableOf(name string, raw json.RawMessage) section {
	s := section{Name: name}
	var rows []map[string]any
	if json.Unmarshal(raw, &rows) != nil {
		var one map[string]any
		if json.Unmarshal(raw, &one) == nil && one != nil {
			rows = []map[string]any{one}
		} else {
			s.Columns = []string{"value"}
			s.Rows = [][]string{{cell(raw)}}
			return s
		}
	}
	cols := map[string]bool{}
	for _, r := range rows {
		for k := range r {
			cols[k] = true
		}
	}
	s.Columns = slices.Sorted(maps.Keys(cols))
	for _, r := range rows {
		line := make([]string, len(s.Columns))
		for i, c := range s.Columns {
			if v, ok := r[c]; ok {
				b, _ := json.Marshal(v)
				line[i] = cell(b)
			}
		}
		s.Rows = append(s.Rows, line)
	}
	return s
}

// cell is a JSON value as one table cell's text: a string without its
// quotes, anything else as JSON.
func cell(raw []byte) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// funcs are the templates' helpers.
var funcs = map[string]any{
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"whenp": func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"fromNow": func(t, now time.Time) string {
		d := t.Sub(now).Round(time.Second)
		if d < 0 {
			return (-d).String() + " ago"
		}
		return "in " + d.String()
	},
	"until": func(t, now time.Time) string {
		d := t.Sub(now).Round(time.Minute)
		if d < 0 {
			return "expired " + (-d).String() + " ago"
		}
		return "in " + d.String()
	},
	"bytes": func(n uint64) string {
		const unit = 1 << 10
		if n < unit {
			return fmt.Sprintf("%d B", n)
		}
		div, exp := uint64(unit), 0
		for m := n / unit; m >= unit; m /= unit {
			div *= unit
			exp++
		}
		return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
	},
	"join": strings.Join,
	"micros": func(us int64) string {
		d := time.Duration(us) * time.Microsecond
		if d >= time.Millisecond {
			d = d.Round(100 * time.Microsecond)
		}
		return d.String()
	},
	// changedIn says a report with outcome changed its resource.
	"changedIn": func(outcome string) bool {
		return outcome == spec.Created || outcome == spec.Changed || outcome == spec.Removed
	},
	"paths": func(o *spec.NodeOverlay) string {
		if o == nil {
			return ""
		}
		direct, relayed := 0, 0
		for _, pth := range o.Peers {
			if pth.Via == "" {
				direct++
			} else {
				relayed++
			}
		}
		return fmt.Sprintf("%d direct, %d relayed", direct, relayed)
	},
}
