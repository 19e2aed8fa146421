package spec

import (
	"strconv"
	"strings"
)

// maxOutcomeNodes is how many nodes an outcome names for one reason; the
// rest are counted.
const maxOutcomeNodes = 20

// AuditOutcome is the push's outcome as the audit keeps it: "ok" when
// every node named was sent its declaration or held it already;
// otherwise the nodes that were not, by reason ("NODE, NODE (reason)"),
// after "partial: " when some were sent and "failed: " when none was.
// What the nodes then applied is theirs to report, not the call's.
func (r PushResult) AuditOutcome() string {
	var reasons []string
	byReason := map[string][]string{}
	failed := 0
	for _, n := range r.Nodes {
		if n.Error == "" {
			continue
		}
		failed++
		if _, ok := byReason[n.Error]; !ok {
			reasons = append(reasons, n.Error)
		}
		byReason[n.Error] = append(byReason[n.Error], n.Node)
	}
	if failed == 0 {
		return "ok"
	}
	parts := make([]string, 0, len(reasons))
	for _, why := range reasons {
		nodes := byReason[why]
		named := strings.Join(nodes[:min(len(nodes), maxOutcomeNodes)], ", ")
		if len(nodes) > maxOutcomeNodes {
			named += " and " + strconv.Itoa(len(nodes)-maxOutcomeNodes) + " more"
		}
		parts = append(parts, named+" ("+why+")")
	}
	word := "partial: "
	if failed == len(r.Nodes) {
		word = "failed: "
	}
	return word + strings.Join(parts, "; ")
}
