package mesh

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// What a node sends is capped on receipt, before it is kept, logged,
// forwarded or shown: a node is not trusted, and no node may make an
// operator's answer too large to send (spec's limits say why each cap is
// what it is).

// keptReport is r as the controller keeps, forwards and shows it: each text
// within spec.MaxReportText, at most spec.MaxReportResults results, and its
// encoding within spec.MaxReportKept. Results past the caps are dropped,
// failures last, and counted in Omitted (added to the count a report kept
// already carries: keeping is idempotent).
func keptReport(r spec.Report) spec.Report {
	clip := func(s string) string { return spec.Clip(s, spec.MaxReportText) }
	omitted := max(r.Omitted, 0)
	r.Digest, r.Refused, r.Waiting, r.Unkept, r.Omitted = clip(r.Digest), clip(r.Refused), clip(r.Waiting), clip(r.Unkept), 0
	results := make([]spec.ResourceResult, len(r.Results))
	for i, res := range r.Results {
		results[i] = spec.ResourceResult{Name: clip(res.Name), Kind: clip(res.Kind), Outcome: clip(res.Outcome), Error: clip(res.Error), Note: clip(res.Note)}
	}
	r.Results = nil
	base, _ := json.Marshal(r)
	// The room for the results: the array's brackets are in base; each
	// result takes its encoding and a comma; the omitted count takes at
	// most `,"omitted":NNNNNNN`.
	room := spec.MaxReportKept - len(base) - 32
	sizes := make([]int, len(results))
	total := 0
	for i, res := range results {
		b, _ := json.Marshal(res)
		sizes[i] = len(b) + 1
		total += sizes[i]
	}
	keep := make([]bool, len(results))
	for i := range keep {
		keep[i] = true
	}
	kept := len(results)
	// Drop from the end, the results that are not failures first: a
	// failure is what the operator must see.
	for _, failures := range []bool{false, true} {
		for i := len(results) - 1; i >= 0 && (kept > spec.MaxReportResults || total > room); i-- {
			if keep[i] && (results[i].Outcome == spec.Failed) == failures {
				keep[i], kept, total = false, kept-1, total-sizes[i]
			}
		}
	}
	r.Results = make([]spec.ResourceResult, 0, kept)
	for i, res := range results {
		if keep[i] {
			r.Results = append(r.Results, res)
		}
	}
	r.Omitted = omitted + len(results) - kept
	return r
}

// keptFacts is f as the controller keeps and shows it: each text within
// spec.MaxFactText, each list within spec.MaxFactList.
func keptFacts(f spec.Facts) spec.Facts {
	clip := func(s string) string { return spec.Clip(s, spec.MaxFactText) }
	for _, s := range []*string{&f.Arch, &f.OS, &f.Kernel, &f.Distro, &f.DistroVer, &f.CPUModel, &f.Virtual, &f.Hostname, &f.Engine, &f.Subnet, &f.TrustInstalled, &f.Intermediate} {
		*s = clip(*s)
	}
	clipList := func(l []string, marker bool) []string {
		if l == nil {
			return nil
		}
		out := make([]string, 0, min(len(l), spec.MaxFactList))
		for i, s := range l {
			if i == spec.MaxFactList {
				if marker {
					out = append(out, fmt.Sprintf("…[%d more not kept]", len(l)-i))
				}
				break
			}
			out = append(out, clip(s))
		}
		return out
	}
	f.Capabilities = clipList(f.Capabilities, false)
	if len(f.Certificates) > spec.MaxFactList {
		f.Certificates = f.Certificates[:spec.MaxFactList]
	}
	if f.Certificates != nil {
		certs := make([]spec.HeldCert, len(f.Certificates))
		for i, c := range f.Certificates {
			certs[i] = spec.HeldCert{Name: clip(c.Name), Path: clip(c.Path), Serial: clip(c.Serial), NotAfter: c.NotAfter}
		}
		f.Certificates = certs
	}
	f.Errors = clipList(f.Errors, true)
	return f
}

// keptHeartbeat is hb with its host version within spec.MaxFactText, and
// at most spec.MaxFallbacks fallbacks (the first: newest first), each text
// within spec.MaxFactText and its retry count within 0 to spec.MaxRetry.
func keptHeartbeat(hb spec.Heartbeat) spec.Heartbeat {
	hb.HostVersion = spec.Clip(hb.HostVersion, spec.MaxFactText)
	if len(hb.Fallbacks) > 0 {
		fbs := make([]spec.Fallback, 0, min(len(hb.Fallbacks), spec.MaxFallbacks))
		for _, f := range hb.Fallbacks[:min(len(hb.Fallbacks), spec.MaxFallbacks)] {
			fbs = append(fbs, spec.Fallback{Digest: spec.Clip(f.Digest, spec.MaxFactText), Reason: spec.Clip(f.Reason, spec.MaxFactText), At: f.At,
				Retry: min(max(f.Retry, 0), spec.MaxRetry)})
		}
		hb.Fallbacks = fbs
	}
	return hb
}

// checkedFallbacks are fbs, node's launcher fall-backs as its heartbeat
// carries them, less those that cannot be true: a digest not of a
// release's form (spec.CheckReleaseDigest), a time zero or ahead of the
// controller's clock by more than spec.ClockSkew. They come from a file
// on the node that may have been tampered with, and status and rolls act
// on them; each one left out is counted and logged (through the log gate).
func (c *Controller) checkedFallbacks(node string, fbs []spec.Fallback) []spec.Fallback {
	var kept []spec.Fallback
	now := c.cfg.Now()
	for _, f := range fbs {
		if err := checkFallback(f, now); err != nil {
			c.metrics.fallbacksRefused.Add(1)
			if ok, held := c.dropLog.allow("fallback/"+node, now); ok {
				c.log.Warn("launcher fall-back refused", "node", node, "err", err, "refused_unlogged_before", held)
			}
			continue
		}
		kept = append(kept, f)
	}
	return kept
}

// checkFallback says why f cannot be a launcher's fall-back at now, or nil.
func checkFallback(f spec.Fallback, now time.Time) error {
	if err := spec.CheckReleaseDigest(f.Digest); err != nil {
		return fmt.Errorf("fall-back: %w", err)
	}
	if f.At.IsZero() {
		return fmt.Errorf("fall-back from %s: no time", f.Digest)
	}
	if f.At.After(now.Add(spec.ClockSkew)) {
		return fmt.Errorf("fall-back from %s at %s: ahead of the controller's clock by more than %s", f.Digest, f.At.UTC().Format(time.RFC3339), spec.ClockSkew)
	}
	return nil
}
