package web

import (
	"context"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// Source is the read-only view of the fleet the pages are rendered from:
// each method answers as the operator API's verb of the same name does,
// from the same code, so the page and the CLI never disagree.
type Source interface {
	// Status is mesh status's answer.
	Status(ctx context.Context) (spec.StatusResult, error)
	// Nodes are the nodes as mesh node list shows them, their facts
	// among what they say; what was last sent to each and its last report
	// may be left out (status says them).
	Nodes(ctx context.Context) ([]spec.Node, error)
	// Node is mesh node show's answer; an error of kind spec.ReplyNotFound
	// when there is no such node.
	Node(ctx context.Context, name string) (spec.Node, error)
	// Overlay is mesh overlay show's answer, every page of it.
	Overlay(ctx context.Context) (spec.OverlayShowResult, error)
	// Certs are the leaves issued to node, in the order they were.
	Certs(ctx context.Context, node string) ([]spec.IssuedCert, error)
	// Grants are the grants minted, never their values.
	Grants(ctx context.Context) ([]spec.GrantInfo, error)
	// Modules are the modules registered and the nodes each is assigned
	// to.
	Modules(ctx context.Context) ([]spec.ModuleInfo, error)
	// Audit is the audit log since a time, oldest first.
	Audit(ctx context.Context, since time.Time) ([]spec.AuditEntry, error)
	// Changes receives when a heartbeat, facts, a report or an operator's
	// call reached the controller; kicks are coalesced, never queued.
	Changes() <-chan struct{}
	// Recorded counts the facts and reports recorded: the pages show
	// more of them than status says, and a page is made again when the
	// count moves.
	Recorded() uint64
	// SilentAfter is how long a node beating every interval may go
	// unheard before status calls it silent.
	SilentAfter(interval time.Duration) time.Duration
}
