package mesh

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
)

// The operator API is this table: one row per verb. A row is the verb as
// spec describes it to both sides (its name, how long a caller waits), its
// handler, and how the audit keeps its arguments (a redaction, which every
// row must name: there is no default). serveAPI serves every row the same
// way. Adding a verb is its constant and descriptor in spec/verbs.go, its
// row here, its handler, and its CLI command; TestEveryVerbHasARow fails
// for a verb spec lists that has no row, no redaction or no timeout.
func (c *Controller) verbRows() []row {
	return []row{
		verb(spec.VerbNodeList, c.listNodes, redactNone),
		verb(spec.VerbNodeShow, c.showNode, redactNone),
		verb(spec.VerbNodeRemove, c.removeNode, redactNone),
		verb(spec.VerbHold, c.hold, redactNone),
		verb(spec.VerbTokenCreate, c.createToken, redactNone),
		verb(spec.VerbTokenList, c.listTokens, redactNone),
		verb(spec.VerbTokenRevoke, c.revokeToken, redactNone),
		verb(spec.VerbModuleRegister, c.registerModules, redactModules),
		verb(spec.VerbModuleList, c.listModules, redactNone),
		verb(spec.VerbModuleShow, c.showModule, redactNone),
		verb(spec.VerbModuleRemove, c.removeModule, redactNone),
		verb(spec.VerbAssign, c.assign, redactSettings),
		verb(spec.VerbUnassign, c.unassign, redactNone),
		verb(spec.VerbBlobPut, c.putBlob, notAudited),
		verb(spec.VerbPush, c.push, redactNone),
		verb(spec.VerbStatus, c.status, redactNone),
		verb(spec.VerbAudit, c.auditLog, redactNone),
		verb(spec.VerbCARoots, c.caRoots, redactNone),
		verb(spec.VerbCADomainAdd, c.addCADomain, redactNone),
		verb(spec.VerbCADomainList, c.listCADomains, redactNone),
		verb(spec.VerbCACerts, c.listCerts, redactNone),
		verb(spec.VerbReleasePublish, c.publishRelease, redactNone),
		verb(spec.VerbReleaseList, c.listReleases, redactNone),
		verb(spec.VerbReleaseRoll, c.startRoll, redactNone),
		verb(spec.VerbRollResume, c.resumeRoll, redactNone),
		verb(spec.VerbRollAbort, c.abortRoll, redactNone),
		verb(spec.VerbRollShow, c.showRoll, redactNone),
	}
}

// row is one verb of the operator API as the controller serves it.
type row struct {
	spec.Verb // the name, and the timeout callers wait
	// call decodes a request, carries it out and encodes its result.
	call   func(ctx context.Context, data []byte) (json.RawMessage, error)
	redact redaction
}

// verb is the row of the verb called name: its request is decoded as a
// Req, unknown fields refused (the caller's mistake), and handed to fn,
// whose Res is the result. The descriptor comes from spec; a name spec
// does not describe gets none, which the table's test refuses.
func verb[Req, Res any](name string, fn func(context.Context, Req) (Res, error), redact redaction) row {
	desc, ok := spec.LookupVerb(name)
	if !ok {
		desc = spec.Verb{Name: name}
	}
	return row{Verb: desc, redact: redact, call: func(ctx context.Context, data []byte) (json.RawMessage, error) {
		var req Req
		if err := spec.Decode(data, &req); err != nil {
			return nil, callerError(fmt.Sprintf("%s: malformed request: %v", name, err))
		}
		res, err := fn(ctx, req)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(res)
		if err != nil {
			return nil, fmt.Errorf("encode %s result: %v", name, err)
		}
		return b, nil
	}}
}

// verbTable is the rows by verb.
func verbTable(rows []row) map[string]row {
	t := make(map[string]row, len(rows))
	for _, r := range rows {
		t[r.Name] = r
	}
	return t
}
