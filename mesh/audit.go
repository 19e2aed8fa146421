package mesh

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// audit records one operator API call with its arguments, secrets redacted.
// A call the audit cannot record is logged as an error: the record is the
// point.
func (c *Controller) audit(ctx context.Context, verb string, data []byte, callErr error) {
	outcome := "ok"
	if callErr != nil {
		outcome = callErr.Error()
	}
	e := store.AuditEntry{At: c.cfg.Now(), Operator: "operator", Verb: verb, Args: c.redact(ctx, verb, data), Outcome: outcome}
	if err := c.deps.DB.Audit(ctx, e); err != nil {
		c.log.Error("api call not audited", "verb", verb, "err", err)
	}
}

// redact is a call's arguments as the audit keeps them: without secret
// settings' values, without blob bytes, and modules by name and version.
func (c *Controller) redact(ctx context.Context, verb string, data []byte) string {
	out := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	switch verb {
	case spec.VerbAssign:
		var req spec.AssignRequest
		if json.Unmarshal(data, &req) != nil {
			return `"(unreadable)"`
		}
		secret := func(string) bool { return true } // unless the module says otherwise
		if mods, err := c.deps.DB.Modules(ctx); err == nil {
			for _, m := range mods {
				if m.Module.Name == req.Module {
					mod := m.Module
					secret = func(name string) bool {
						s, ok := mod.Setting(name)
						return !ok || s.Secret
					}
				}
			}
		}
		for k := range req.Settings {
			if secret(k) {
				req.Settings[k] = "(secret)"
			}
		}
		return out(req)
	case spec.VerbBlobPut:
		var req spec.BlobPutRequest
		json.Unmarshal(data, &req)
		req.Data = nil
		return out(req)
	case spec.VerbModuleRegister:
		var req spec.ModuleRegisterRequest
		json.Unmarshal(data, &req)
		var mods []string
		for _, m := range req.Modules {
			mods = append(mods, m.Name+" "+m.Version)
		}
		return out(map[string]any{"modules": mods})
	case spec.VerbAudit, spec.VerbCARoots, spec.VerbStatus, spec.VerbNodeList, spec.VerbNodeShow, spec.VerbModuleList, spec.VerbModuleShow,
		spec.VerbTokenList, spec.VerbTokenCreate, spec.VerbTokenRevoke, spec.VerbNodeRemove, spec.VerbUnassign, spec.VerbPush, spec.VerbHold:
		return string(data) // nothing secret in these
	default:
		return `"(unknown verb: arguments not kept)"`
	}
}

func (c *Controller) auditLog(ctx context.Context, req spec.AuditRequest) (spec.AuditResult, error) {
	limit := req.Limit
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	since := req.Since
	if since.IsZero() {
		since = c.cfg.Now().Add(-24 * time.Hour)
	}
	es, err := c.deps.DB.AuditSince(ctx, since, limit)
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
