package mesh

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
)

// The operator API is this table: one row per verb. A row is the verb as
// spec describes it to both sides (its name, its request and result types,
// how long a caller waits), its handler, and how the audit keeps its
// arguments (a redaction, which every row must name: there is no default).
// serveAPI serves every row the same way. A row whose handler does not take
// its verb's request and return its result does not compile. Adding a verb
// is its Verb in spec/verbs.go, its row here, its handler, and its CLI
// command; TestEveryVerbHasARow fails for a verb spec lists that has no
// row, no redaction or no timeout, and cli's TestEveryVerbHasACaller for
// one no command calls.
func (c *Controller) verbRows() []row {
	return []row{
		verb(spec.NodeList, c.listNodes, redactNone),
		verb(spec.NodeShow, c.showNode, redactNone),
		verb(spec.NodeRemove, c.enrolment.removeNode, redactNone),
		verb(spec.NodeHold, c.hold, redactNone),
		verb(spec.TokenCreate, c.enrolment.createToken, redactNone),
		verb(spec.TokenList, c.enrolment.listTokens, redactNone),
		verb(spec.TokenRevoke, c.enrolment.revokeToken, redactNone),
		verb(spec.ClusterRemove, c.removeController, redactNone),
		verb(spec.ModuleRegister, c.modules.registerModules, redactModules),
		verb(spec.ModuleList, c.modules.listModules, redactNone),
		verb(spec.ModuleShow, c.modules.showModule, redactNone),
		verb(spec.ModuleRemove, c.modules.removeModule, redactNone),
		verb(spec.Assign, c.modules.assign, redactSettings),
		verb(spec.Unassign, c.modules.unassign, redactNone),
		verb(spec.BlobPut, c.blobs.putBlob, notAudited),
		verb(spec.GrantList, c.modules.listGrants, redactNone),
		verb(spec.GrantRotate, c.modules.rotateGrants, redactNone),
		verb(spec.Push, c.push, redactNone),
		verb(spec.Status, c.status, redactNone),
		verb(spec.Audit, c.auditor.auditLog, redactNone),
		verb(spec.CARoots, c.caRoots, redactNone),
		verb(spec.CADomainAdd, c.certs.addCADomain, redactNone),
		verb(spec.CADomainList, c.certs.listCADomains, redactNone),
		verb(spec.CACerts, c.certs.listCerts, redactNone),
		verb(spec.ReleasePublish, c.publishRelease, redactNone),
		verb(spec.ReleaseList, c.listReleases, redactNone),
		verb(spec.ReleaseRoll, c.roller.startRoll, redactNone),
		verb(spec.RollResume, c.roller.resumeRoll, redactNone),
		verb(spec.RollAbort, c.roller.abortRoll, redactNone),
		verb(spec.RollShow, c.roller.showRoll, redactNone),
		verb(spec.OverlayEnable, c.overlays.enable, redactNone),
		verb(spec.OverlayDisable, c.overlays.disable, redactNone),
		verb(spec.OverlayShow, c.overlays.show, redactNone),
		verb(spec.UILogin, c.ui.login, redactNone),
		verb(spec.UIToken, c.ui.token, redactNone),
	}
}

// row is one verb of the operator API as the controller serves it.
type row struct {
	spec.VerbInfo // the name, and the timeout callers wait
	// call decodes a request, carries it out and encodes its result.
	call   func(ctx context.Context, data []byte) (answer, error)
	redact redaction
}

// answer is a call's encoded result, and its outcome as the audit keeps
// it: "ok", or what the result says it did not do.
type answer struct {
	body    json.RawMessage
	outcome string
}

// auditOutcome is a result that says its call's outcome: one that came
// back without an error can still have done only part of what was asked
// (a push some nodes were not sent: "partial: NODE, NODE (reason)", or
// none: "failed: ..."). A result without the method is "ok".
type auditOutcome interface{ AuditOutcome() string }

// verb is the row of v: its request is decoded as a Req, unknown fields
// refused (the caller's mistake), and handed to fn, whose Res is the
// result.
func verb[Req, Res any](v spec.Verb[Req, Res], fn func(context.Context, Req) (Res, error), redact redaction) row {
	name := v.Name
	return row{VerbInfo: v.Info(), redact: redact, call: func(ctx context.Context, data []byte) (answer, error) {
		var req Req
		if err := spec.Decode(data, &req); err != nil {
			return answer{}, callerError(fmt.Sprintf("%s: malformed request: %v", name, err))
		}
		res, err := fn(ctx, req)
		if err != nil {
			return answer{}, err
		}
		b, err := json.Marshal(res)
		if err != nil {
			return answer{}, fmt.Errorf("encode %s result: %v", name, err)
		}
		outcome := "ok"
		if o, ok := any(res).(auditOutcome); ok {
			outcome = o.AuditOutcome()
		}
		return answer{body: b, outcome: outcome}, nil
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
