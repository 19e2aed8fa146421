package mesh

import (
	"context"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/web"
)

// View is the controller as the status pages read it (web.Source): each
// method is the operator API's verb of that name, its handler called in
// process, so the pages say what the CLI says.
type View struct{ c *Controller }

var _ web.Source = View{}

// Status is mesh status.
func (v View) Status(ctx context.Context) (spec.StatusResult, error) {
	return v.c.status(ctx, spec.StatusRequest{})
}

// Nodes is every node as mesh node list shows it (Controller.nodeView), without
// what was last sent to each and its last report: status says those, and
// reading them is two reads of the store a node.
func (v View) Nodes(ctx context.Context) ([]spec.Node, error) {
	nodes, err := v.c.deps.DB.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	now := v.c.cfg.Now()
	out := make([]spec.Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, v.c.nodeView(n, now))
	}
	return out, nil
}

// Node is mesh node show.
func (v View) Node(ctx context.Context, name string) (spec.Node, error) {
	res, err := v.c.showNode(ctx, spec.NodeShowRequest{Name: name})
	return res.Node, err
}

// Overlay is mesh overlay show, every page.
func (v View) Overlay(ctx context.Context) (spec.OverlayShowResult, error) {
	var all spec.OverlayShowResult
	req := spec.OverlayShowRequest{}
	for {
		res, err := v.c.overlays.show(ctx, req)
		if err != nil {
			return spec.OverlayShowResult{}, err
		}
		members := append(all.Members, res.Members...)
		all, all.Members = res, members
		if res.Next == "" {
			all.Next = ""
			return all, nil
		}
		req.After = res.Next
	}
}

// Certs is mesh ca certs, every page, of one node.
func (v View) Certs(ctx context.Context, node string) ([]spec.IssuedCert, error) {
	var out []spec.IssuedCert
	req := spec.CACertsRequest{}
	for {
		res, err := v.c.certs.listCerts(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, cert := range res.Certs {
			if cert.Node == node {
				out = append(out, cert)
			}
		}
		if res.Next == 0 {
			return out, nil
		}
		req.After = res.Next
	}
}

// Grants is mesh grant list.
func (v View) Grants(ctx context.Context) ([]spec.GrantInfo, error) {
	res, err := v.c.modules.listGrants(ctx, spec.GrantListRequest{})
	return res.Grants, err
}

// Modules is mesh module list.
func (v View) Modules(ctx context.Context) ([]spec.ModuleInfo, error) {
	res, err := v.c.modules.listModules(ctx, spec.ModuleListRequest{})
	return res.Modules, err
}

// auditPages bounds the answers Audit reads.
const auditPages = 50

// Audit is mesh audit since a time, answer after answer (at most
// auditPages of them).
func (v View) Audit(ctx context.Context, since time.Time) ([]spec.AuditEntry, error) {
	var all []spec.AuditEntry
	for range auditPages {
		res, err := v.c.auditor.auditLog(ctx, spec.AuditRequest{Since: since, Limit: 10000})
		if err != nil {
			return nil, err
		}
		all = append(all, res.Entries...)
		if !res.More || len(res.Entries) == 0 {
			break
		}
		// The store reads from a time on, the next answer from just
		// past the last one's.
		since = res.Entries[len(res.Entries)-1].Time.Add(time.Microsecond)
	}
	return all, nil
}

// Changes receives when a heartbeat, facts, a report or an operator's
// call reached the controller.
func (v View) Changes() <-chan struct{} { return v.c.changes }

// Recorded counts the facts and report batches the controller recorded.
func (v View) Recorded() uint64 { return v.c.recorded.Load() }

// record tells the pages facts or reports were recorded: what they show
// of a node changed, though status may say the same.
func (c *Controller) record() {
	c.recorded.Add(1)
	c.changes.kick()
}

// SilentAfter is the rule status calls a node silent by.
func (View) SilentAfter(interval time.Duration) time.Duration { return SilentAfter(interval) }

// pulse tells the pages something reached the controller; kicks that
// come while one waits are one.
type pulse chan struct{}

func (p pulse) kick() {
	select {
	case p <- struct{}{}:
	default:
	}
}
