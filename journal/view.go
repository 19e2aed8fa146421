package journal

import "github.com/mesh-fleet/mesh/store"

// View is the controller's store as the journal keeps it: every read
// answered by the view (the SQLite store), every write appended to the
// log and answered once the view applied it. Its writes are grouped by
// concern, as the store's are.
type View struct {
	*store.DB
	meshWrites
	nodeWrites
	tokenWrites
	moduleWrites
	blobWrites
	recordWrites
	caWrites
	rollWrites
	grantWrites
	overlayWrites
}

func newView(j *Journal) *View {
	return &View{DB: j.db,
		meshWrites: meshWrites{j}, nodeWrites: nodeWrites{j}, tokenWrites: tokenWrites{j},
		moduleWrites: moduleWrites{j}, blobWrites: blobWrites{j}, recordWrites: recordWrites{j},
		caWrites: caWrites{j}, rollWrites: rollWrites{j}, grantWrites: grantWrites{j}, overlayWrites: overlayWrites{j}}
}
