package mesh

import (
	"context"
	"net/netip"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// Store is what the controller reads and writes, as package store provides
// it: the union of the store's concerns below, each an interface so a part
// of the controller can take only the one it uses. It is an interface so a
// test can make one read fail for one node and see that failure raised,
// never read as an absence (invariant 1).
type Store interface {
	MeshStore
	NodeStore
	TokenStore
	ModuleStore
	AssignmentStore
	BlobStore
	UploadStore
	DeclarationStore
	RosterStore
	ReportStore
	CAStore
	ReleaseStore
	RollStore
	GrantStore
	AuditStore
	OverlayStore
}

var _ Store = (*store.DB)(nil)

// MeshStore reads the mesh itself and its operators, and keeps the
// mesh's edge storage key.
type MeshStore interface {
	Mesh(ctx context.Context) (store.Mesh, error)
	Operators(ctx context.Context) ([]store.Operator, error)
	EdgeStorageKey(ctx context.Context) (string, error)
	KeepEdgeStorageKey(ctx context.Context, sealed string, at time.Time) (string, error)
}

// NodeStore keeps the nodes: their keys, heartbeats, facts, holds and
// removal.
type NodeStore interface {
	Node(ctx context.Context, name string) (store.Node, error)
	Nodes(ctx context.Context) ([]store.Node, error)
	NodeKeys(ctx context.Context) ([]store.NodeKey, error)
	NodeCount(ctx context.Context) (int, error)
	NodesLeaving(ctx context.Context) (nodes, leaving int, err error)
	NodesNamed(ctx context.Context, names []string) (map[string]store.Node, error)
	RecordHeartbeat(ctx context.Context, hb spec.Heartbeat, at time.Time) error
	RecordHeartbeats(ctx context.Context, hbs []spec.Heartbeat, at time.Time) (map[string]error, error)
	RecordFacts(ctx context.Context, f spec.Facts, at time.Time) error
	BeginRemoval(ctx context.Context, name string, at time.Time) error
	RemoveNode(ctx context.Context, name string) error
	Hold(ctx context.Context, node string, at time.Time, reason string) error
}

// TokenStore keeps the enrolment tokens, and enrols a node with one.
type TokenStore interface {
	AddToken(ctx context.Context, t store.Token) error
	Token(ctx context.Context, id string) (store.Token, error)
	Tokens(ctx context.Context) ([]store.Token, error)
	OpenTokens(ctx context.Context) ([]store.Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time) error
	Enrol(ctx context.Context, id string, n store.Node) error
}

// ModuleStore keeps the registered modules.
type ModuleStore interface {
	RegisterModules(ctx context.Context, mods []spec.Module, at time.Time) (map[string]string, error)
	Modules(ctx context.Context) ([]store.Module, error)
	Module(ctx context.Context, name string) (store.Module, error)
	RemoveModule(ctx context.Context, name string) (store.Module, error)
}

// AssignmentStore keeps which modules are assigned to which nodes.
type AssignmentStore interface {
	Assign(ctx context.Context, module, node string, settings map[string]string, at time.Time) error
	Reassign(ctx context.Context, module, node string, set map[string]string, unset []string, at time.Time) error
	Unassign(ctx context.Context, module, node string) error
	Assignments(ctx context.Context) ([]store.Assignment, error)
	AssignmentsOf(ctx context.Context, node string) ([]store.Assignment, error)
	Assignment(ctx context.Context, module, node string) (store.Assignment, error)
	RewriteSettings(ctx context.Context, modules []string, rewrite func(store.Assignment, spec.Module) (map[string]string, bool, error)) (int, error)
}

// BlobStore keeps the content-addressed blobs, and collects those nothing
// holds.
type BlobStore interface {
	PutBlob(ctx context.Context, digest string, data []byte, at time.Time) error
	TouchBlob(ctx context.Context, digest string, at time.Time) (bool, error)
	CollectBlobs(ctx context.Context, before, at time.Time) ([]store.CollectedBlob, error)
	HasBlob(ctx context.Context, digest string) (bool, error)
	BlobChunk(ctx context.Context, digest string, offset, n int64) ([]byte, int64, error)
	BlobSize(ctx context.Context, digest string) (int64, error)
	Blob(ctx context.Context, digest string) ([]byte, error)
}

// UploadStore keeps the uploads of blobs under way, chunk by chunk.
type UploadStore interface {
	BeginUpload(ctx context.Context, digest string, size int64, at time.Time) (bool, error)
	UploadOf(ctx context.Context, digest string) (store.Upload, error)
	PutUploadChunk(ctx context.Context, digest string, offset int64, data, hash []byte, whole bool, at time.Time) error
	DropUpload(ctx context.Context, digest string) error
	DropUploadsBefore(ctx context.Context, before time.Time) (int, error)
}

// DeclarationStore keeps the last declaration sent to each node, and the
// last it received.
type DeclarationStore interface {
	RecordDeclarations(ctx context.Context, ds []store.Declaration) (map[string]error, error)
	LastDeclaration(ctx context.Context, node string) (store.Declaration, error)
	DeclarationHeads(ctx context.Context, nodes []string) (map[string]store.Declaration, error)
	LastReceived(ctx context.Context, node string) ([]byte, error)
}

// RosterStore keeps the last roster sent to the mesh.
type RosterStore interface {
	RecordRoster(ctx context.Context, r store.Roster) error
	LastRoster(ctx context.Context) (store.Roster, error)
	LastRosterSeq(ctx context.Context) (uint64, error)
}

// ReportStore keeps each node's last report.
type ReportStore interface {
	RecordReports(ctx context.Context, rs []store.ReportRecord) (map[int]error, error)
	LastReport(ctx context.Context, node string) (store.Report, error)
	FailedReports(ctx context.Context) (map[string]uint64, error)
}

// CAStore keeps the CA's domains and the certificates it issued.
type CAStore interface {
	CADomains(ctx context.Context) ([]store.CADomain, error)
	SetIntermediate(ctx context.Context, in store.Intermediate, domain string) error
	Intermediate(ctx context.Context) (store.Intermediate, error)
	RecordCert(ctx context.Context, c store.Cert) error
	Certs(ctx context.Context, after int64, limit int) ([]store.Cert, error)
	LatestCerts(ctx context.Context) ([]store.NameCert, error)
}

// ReleaseStore keeps the published releases of mesh.
type ReleaseStore interface {
	PublishRelease(ctx context.Context, r store.Release) (store.Release, error)
	Releases(ctx context.Context, after int64, limit int) ([]store.Release, error)
	Release(ctx context.Context, digest string) (store.Release, error)
}

// RollStore keeps the rolls of a release across the mesh, and the binary
// each node carries.
type RollStore interface {
	StartRoll(ctx context.Context, r store.Roll) (store.Roll, error)
	ActiveRoll(ctx context.Context) (store.Roll, error)
	RollByID(ctx context.Context, id int64) (store.Roll, error)
	BeginRollStep(ctx context.Context, roll int64, position int, at time.Time) error
	EndRollStep(ctx context.Context, roll int64, position int, state, cause string, at time.Time) error
	FinishRoll(ctx context.Context, roll int64, at time.Time) error
	ResumeRoll(ctx context.Context, retry []string) (store.Roll, error)
	AbortRoll(ctx context.Context, at time.Time) (store.Roll, []string, error)
	NodeBinary(ctx context.Context, node string) (store.Release, error)
	NodeBinaries(ctx context.Context) (map[string]store.Release, error)
}

// GrantStore keeps the credentials minted for the consumers of grants.
type GrantStore interface {
	PutGrants(ctx context.Context, gs []store.Grant) error
	RotateGrants(ctx context.Context, module, node string, credentials map[string]string, at time.Time) error
	Grants(ctx context.Context) ([]store.Grant, error)
}

// AuditStore keeps the audit log.
type AuditStore interface {
	Audit(ctx context.Context, e store.AuditEntry) error
	AuditSince(ctx context.Context, since time.Time, limit int) ([]store.AuditEntry, error)
}

// OverlayStore keeps the overlay: its range, each node's address, and what
// the hosts report of their overlay.
type OverlayStore interface {
	Overlay(ctx context.Context) (store.Overlay, error)
	EnableOverlay(ctx context.Context, cidr netip.Prefix, at time.Time) (int, error)
	DisableOverlay(ctx context.Context) (bool, error)
	RecordOverlayState(ctx context.Context, s spec.OverlayState, at time.Time) (bool, error)
	OverlayReports(ctx context.Context) (map[string]store.OverlayReport, error)
	OverlayReportOf(ctx context.Context, node string) (store.OverlayReport, error)
}
