package mesh

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
)

// oversize says why node's declaration of size bytes does not fit under
// spec.MaxDeclaration, naming what is large: the modules that take the most
// of it (bytes and resources each), the largest resources, and the roster.
// Nil when it fits. A push sends such a node nothing; status says this
// instead of "mesh push NODE", which could not help.
func oversize(node string, size int, resources []spec.Resource, roster spec.Roster) error {
	if size <= spec.MaxDeclaration {
		return nil
	}
	type weight struct {
		name  string
		bytes int
		count int
	}
	byModule := map[string]*weight{}
	var largest []weight
	for _, r := range resources {
		b, _ := json.Marshal(r)
		m := byModule[r.Module]
		if m == nil {
			m = &weight{name: r.Module}
			byModule[r.Module] = m
		}
		m.bytes += len(b)
		m.count++
		largest = append(largest, weight{name: r.Name, bytes: len(b)})
	}
	mods := make([]weight, 0, len(byModule))
	for _, m := range byModule {
		mods = append(mods, *m)
	}
	heaviest := func(ws []weight) []weight {
		sort.Slice(ws, func(i, j int) bool {
			if ws[i].bytes != ws[j].bytes {
				return ws[i].bytes > ws[j].bytes
			}
			return ws[i].name < ws[j].name
		})
		return ws[:min(len(ws), 3)]
	}
	var ms, rs []string
	for _, m := range heaviest(mods) {
		ms = append(ms, fmt.Sprintf("module %s %s in %d resources", m.name, kib(m.bytes), m.count))
	}
	for _, r := range heaviest(largest) {
		rs = append(rs, fmt.Sprintf("%s %s", r.name, kib(r.bytes)))
	}
	rosterSays := "the roster travels apart, in its own message"
	if roster.Nodes != nil || roster.Routes != nil {
		rb, _ := json.Marshal(roster)
		rosterSays = "the roster takes " + kib(len(rb))
	}
	inline := 0 // file contents carried inside, as encoded (base64)
	for _, r := range resources {
		if f, ok := spec.As[*spec.FileSpec](r); ok && f != nil && !f.Blob {
			inline += (len(f.Content) + 2) / 3 * 4
		}
	}
	advice := fmt.Sprintf("assign some of its modules to another node, or declare fewer resources (it declares %d)", len(resources))
	if inline > size/2 {
		advice = fmt.Sprintf("file contents up to %s travel inside the declaration (%s of it here) and a file over %s travels as a blob outside it: ship many small contents as one archive file over %s, or assign some of its modules to another node",
			kib(spec.InlineMax), kib(inline), kib(spec.InlineMax), kib(spec.InlineMax))
	}
	return callerError(fmt.Sprintf("the declaration of node %q would be %s, over the %s cap, so nothing was sent to it: %s; the largest resources: %s; %s. To make it fit, %s",
		node, kib(size), kib(spec.MaxDeclaration), strings.Join(ms, ", "), strings.Join(rs, ", "), rosterSays, advice))
}

// kib is n bytes in KiB, or in bytes under one.
func kib(n int) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
