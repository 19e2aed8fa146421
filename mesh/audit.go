package mesh

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// auditor keeps the record of operator API calls, and of nodes' CSRs:
// written to the store, or queued in memory while the store refuses.
type auditor struct {
	base
	verbs map[string]row // the API's rows, for their redactions
	mu    sync.Mutex
	// pending are the calls the store did not take yet, oldest first.
	pending []store.AuditEntry
	kick    chan struct{}
}

// audit records one operator API call with its arguments, secrets
// redacted, and its outcome: the result's (outcome: "ok", or "partial:
// ..." for a result that did part of what was asked), or "failed: " and
// callErr when the call failed. An operator call that was made is always audited, even if it failed: an
// entry the store cannot take now (it is busy, held by another writer) is
// queued, in order, and written by drainAudit as soon as the store takes
// writes again.
func (a *auditor) audit(ctx context.Context, verb string, data []byte, outcome string, callErr error) {
	switch {
	case callErr != nil:
		outcome = "failed: " + callErr.Error()
	case outcome == "":
		outcome = "ok"
	}
	a.keepAudit(ctx, store.AuditEntry{At: a.now(), Operator: "operator", Verb: verb, Args: a.redact(ctx, verb, data), Outcome: outcome})
}

// keepAudit writes e, or queues it, in order, when the store does not take
// it now.
func (a *auditor) keepAudit(ctx context.Context, e store.AuditEntry) {
	verb := e.Verb
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) == 0 {
		err := a.db.Audit(ctx, e)
		if err == nil {
			return
		}
		a.log.Warn("api call not audited yet: queued, and written once the store takes it", "verb", verb, "err", err)
	}
	if len(a.pending) >= maxAuditPending {
		// The log is the record of last resort.
		a.log.Error("api call not audited: the audit queue is full", "verb", verb, "at", e.At, "args", e.Args, "outcome", e.Outcome)
		return
	}
	a.pending = append(a.pending, e)
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// maxAuditPending bounds the audit entries kept in memory while the store
// refuses them.
const maxAuditPending = 10000

// auditRetry is how long drainAudit waits before it tries a refused entry
// again.
const auditRetry = 500 * time.Millisecond

// drainAudit writes the queued audit entries, oldest first, until ctx ends;
// then it tries once more and logs, as the record of last resort, each entry
// the store still refuses.
func (a *auditor) drainAudit(ctx context.Context) {
	defer a.guard.catch("audit queue", nil)
	retry := time.NewTimer(auditRetry)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if a.writeAudit(last) != nil {
				a.mu.Lock()
				for _, e := range a.pending {
					a.log.Error("api call not audited: the store refused it until the controller stopped", "verb", e.Verb, "at", e.At, "args", e.Args, "outcome", e.Outcome)
				}
				a.pending = nil
				a.mu.Unlock()
			}
			return
		case <-a.kick:
		case <-retry.C:
		}
		if err := a.writeAudit(ctx); err != nil {
			retry.Reset(auditRetry)
		}
	}
}

// writeAudit writes the queued entries, oldest first, and stops at the
// first the store refuses. Only drainAudit takes entries off the queue, and
// it holds no lock while the store answers, so calls go on being queued.
func (a *auditor) writeAudit(ctx context.Context) error {
	for {
		a.mu.Lock()
		if len(a.pending) == 0 {
			a.pending = nil
			a.mu.Unlock()
			return nil
		}
		e := a.pending[0]
		a.mu.Unlock()
		if err := a.db.Audit(ctx, e); err != nil {
			return err
		}
		a.mu.Lock()
		a.pending = a.pending[1:]
		a.mu.Unlock()
	}
}

// auditQueued is how many audit entries wait for the store.
func (a *auditor) auditQueued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

// redact is a call's arguments as the audit keeps them, by its verb's
// redaction: without secret settings' values, and modules by name and
// version. A verb no row knows keeps nothing.
func (a *auditor) redact(ctx context.Context, verb string, data []byte) string {
	row, ok := a.verbs[verb]
	if !ok || row.redact.args == nil {
		return `"(unknown verb: arguments not kept)"`
	}
	return row.redact.args(a.db, ctx, data)
}

// redaction is how the audit keeps a verb's arguments. Every row of the
// API names one, so a verb cannot be audited with its secrets by default.
type redaction struct {
	rule string // what is kept; empty is no rule, which the table's test refuses
	// args is the arguments as kept; nil for a verb whose calls are not
	// audited.
	args func(db Store, ctx context.Context, data []byte) string
}

var (
	// redactNone keeps the arguments as they came: nothing secret in them.
	redactNone = redaction{rule: "as given: nothing secret", args: func(_ Store, _ context.Context, data []byte) string {
		return string(data)
	}}
	// redactSettings keeps an assignment without the values of its
	// secret settings (and of settings the module does not declare).
	redactSettings = redaction{rule: "secret settings' values left out", args: assignArgs}
	// redactModules keeps a registration's modules by name and version.
	redactModules = redaction{rule: "modules by name and version", args: func(_ Store, _ context.Context, data []byte) string {
		var req spec.ModuleRegisterRequest
		json.Unmarshal(data, &req)
		var mods []string
		for _, m := range req.Modules {
			mods = append(mods, m.Name+" "+m.Version)
		}
		return auditJSON(map[string]any{"modules": mods})
	}}
	// notAudited is a blob upload's chunks: the registration they belong
	// to is audited.
	notAudited = redaction{rule: "not audited"}
)

func assignArgs(db Store, ctx context.Context, data []byte) string {
	var req spec.AssignRequest
	if json.Unmarshal(data, &req) != nil {
		return `"(unreadable)"`
	}
	secret := func(string) bool { return true } // unless the module says otherwise
	if m, err := db.Module(ctx, req.Module); err == nil {
		mod := m.Module
		secret = func(name string) bool {
			s, ok := mod.Setting(name)
			return !ok || s.Secret
		}
	}
	for k := range req.Settings {
		if secret(k) {
			req.Settings[k] = "(secret)"
		}
	}
	return auditJSON(req)
}

func auditJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (a *auditor) auditLog(ctx context.Context, req spec.AuditRequest) (spec.AuditResult, error) {
	limit := req.Limit
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	since := req.Since
	if since.IsZero() {
		since = a.now().Add(-24 * time.Hour)
	}
	es, err := a.db.AuditSince(ctx, since, limit)
	if err != nil {
		return spec.AuditResult{}, err
	}
	res := spec.AuditResult{Entries: []spec.AuditEntry{}}
	size := replyOverhead
	for _, e := range es {
		entry := spec.AuditEntry{Time: e.At.UTC(), Operator: e.Operator, Verb: e.Verb,
			Args: spec.Clip(e.Args, spec.MaxAuditText), Outcome: spec.Clip(e.Outcome, spec.MaxAuditText)}
		b, _ := json.Marshal(entry)
		if size += len(b) + 1; size > spec.MaxReply {
			res.More = true
			break
		}
		res.Entries = append(res.Entries, entry)
	}
	return res, nil
}
