package journal

import (
	"context"

	"github.com/mesh-fleet/mesh/store"
)

// recordWrites are the writes of what was sent and heard: declarations,
// rosters, reports, and the audit log.
type recordWrites struct{ j *Journal }

var (
	recordDeclarations = op[[]store.Declaration, map[string]error]{"RecordDeclarations", func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error) {
		return db.RecordDeclarations(ctx, ds)
	}}
	recordRoster = op[store.Roster, none]{"RecordRoster", func(ctx context.Context, db *store.DB, r store.Roster) (none, error) {
		return none{}, db.RecordRoster(ctx, r)
	}}
	recordReports = op[[]store.ReportRecord, map[int]error]{"RecordReports", func(ctx context.Context, db *store.DB, rs []store.ReportRecord) (map[int]error, error) {
		return db.RecordReports(ctx, rs)
	}}
	audit = op[store.AuditEntry, none]{"Audit", func(ctx context.Context, db *store.DB, e store.AuditEntry) (none, error) {
		return none{}, db.Audit(ctx, e)
	}}
)

func recordOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){recordDeclarations.apply, recordRoster.apply, recordReports.apply, audit.apply}
}

// RecordDeclarations records ds, in one entry.
func (w recordWrites) RecordDeclarations(ctx context.Context, ds []store.Declaration) (map[string]error, error) {
	return recordDeclarations.call(ctx, w.j, ds)
}

// RecordRoster records r.
func (w recordWrites) RecordRoster(ctx context.Context, r store.Roster) error {
	_, err := recordRoster.call(ctx, w.j, r)
	return err
}

// RecordReports records rs, in one entry.
func (w recordWrites) RecordReports(ctx context.Context, rs []store.ReportRecord) (map[int]error, error) {
	return recordReports.call(ctx, w.j, rs)
}

// Audit appends e to the audit log.
func (w recordWrites) Audit(ctx context.Context, e store.AuditEntry) error {
	_, err := audit.call(ctx, w.j, e)
	return err
}
