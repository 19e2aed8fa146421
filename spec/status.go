package spec

import "time"

// API requests and results of the operator's view.
type (
	// HoldRequest holds (Hold true) or releases a node.
	HoldRequest struct {
		Node   string `json:"node"`
		Hold   bool   `json:"hold"`
		Reason string `json:"reason,omitempty"`
	}

	StatusRequest struct{}

	// StatusResult is the whole mesh at a glance. AllClear is set only when
	// every node is heard, applied the latest, has nothing pending, no
	// failure and no hold; Problems says, node by node, what stands in the
	// way.
	StatusResult struct {
		Time     time.Time           `json:"time"`
		Nodes    []NodeStatus        `json:"nodes"`
		Versions map[string][]string `json:"versions"` // host version -> nodes; no order is claimed between versions
		AllClear bool                `json:"all_clear"`
		Problems []string            `json:"problems"`
		// Intermediate is the serial of the mesh's intermediate that
		// signs now, which every declaration carries.
		Intermediate string `json:"intermediate"`
		// Roll is the roll running or halted, else the latest one; nil
		// when no release was ever rolled.
		Roll *Roll `json:"roll,omitempty"`
		// StoreBusy says the controller's store has refused heartbeats'
		// writes since a time ("the store is busy since T: heartbeats are
		// not being recorded"), or why they fail; empty while they are
		// recorded. Nodes are then shown as the controller heard them,
		// not as silent; it is also the first of Problems, and stands in
		// the way of the all-clear.
		StoreBusy string `json:"store_busy,omitempty"`
		// Public are the roster's public names, by name, each with the
		// edges serving it: those failing first when there are more
		// than MaxStatusPublic, the rest counted in PublicOmitted.
		Public        []PublicStatus `json:"public,omitempty"`
		PublicOmitted int            `json:"public_omitted,omitempty"`
	}

	// PublicStatus is one public name of the roster as status shows it:
	// the node and module that serve it inside the mesh, and the state of
	// its certificate on each edge assigned (none: no edge serves it).
	PublicStatus struct {
		Name   string       `json:"name"`
		Node   string       `json:"node"`
		Module string       `json:"module"`
		Edges  []PublicEdge `json:"edges"`
	}

	// PublicEdge is a public name's certificate on one edge, as the edge
	// last reported it (Reported; zero: it has not): its state (an
	// EdgeState's, or "not reported", "not served" when the edge's report
	// leaves the name out), its expiry, the last ACME error, when it
	// was, and when certmagic tries again. Problem says what stands in
	// the all-clear's way ("": nothing).
	PublicEdge struct {
		Edge     string    `json:"edge"`
		State    string    `json:"state"`
		NotAfter time.Time `json:"not_after,omitzero"`
		Error    string    `json:"error,omitempty"`
		ErrorAt  time.Time `json:"error_at,omitzero"`
		Retry    time.Time `json:"retry,omitzero"`
		Reported time.Time `json:"reported,omitzero"`
		Problem  string    `json:"problem,omitempty"`
	}

	// NodeStatus is one node as status shows it.
	NodeStatus struct {
		Node      string     `json:"node"`
		LastHeard *time.Time `json:"last_heard"`
		// Heard is "never", or how long ago; Silent is set when the node
		// has missed two heartbeats (HeartbeatMS, how often it said it
		// sends one; zero if it did not say, and then 30 s unheard).
		Heard       string `json:"heard"`
		Silent      bool   `json:"silent"`
		HeartbeatMS int64  `json:"heartbeat_ms,omitempty"`
		// SentSeq and AppliedSeq; State is "current", "applying" (sent,
		// not yet reported applied), "nothing sent", "never heard",
		// "being removed" (a removal that failed half-way; Heard is "-"),
		// or "not believed" (it reports applying a sequence far above the
		// last sent to it: see MaxSeqAhead; Problems says which).
		SentSeq    uint64 `json:"sent_seq"`
		AppliedSeq uint64 `json:"applied_seq"`
		State      string `json:"state"`
		// Pending says what the mesh would send now differs from what it last
		// sent (compared without the sequence and times); PendingWhy names
		// a node-own composition failure instead.
		Pending    bool   `json:"pending"`
		PendingWhy string `json:"pending_why,omitempty"`
		// Intermediate is the serial of the mesh's intermediate the node
		// said (in its facts) it holds; empty if it has not said. One
		// other than StatusResult.Intermediate is pending until a push
		// hands the node the new chain: a problem, not a failure.
		Intermediate string `json:"intermediate,omitempty"`
		// Failures are "resource: cause" from the last report, then the
		// certificates the node holds a name for that expire within a week
		// (or expired) and were not renewed.
		Failures []string `json:"failures"`
		// Notes are "resource: note" from the last report: a container
		// started again and why it had stopped. Told, not problems.
		Notes   []string `json:"notes,omitempty"`
		Refused string   `json:"refused,omitempty"`
		// Flooding says that the node sent heartbeats faster than a host
		// does, and how many; empty when it did not within the last minute.
		Flooding   string `json:"flooding,omitempty"`
		Held       bool   `json:"held"`
		HeldReason string `json:"held_reason,omitempty"`
		// HostVersion is compared for equality only.
		HostVersion string `json:"host_version"`
		// Binary is the release its declarations carry (a roll declared
		// it), empty when none; Fallbacks are the versions its launcher
		// gave up on, as its heartbeats report them.
		Binary        string     `json:"binary,omitempty"`
		Fallbacks     []Fallback `json:"fallbacks,omitempty"`
		Protocol      int        `json:"protocol"`
		ProtocolKnown bool       `json:"protocol_known"`
	}

	CARootsRequest struct{}
	// CARootsResult is the mesh's root certificates, PEM, and their pins.
	CARootsResult struct {
		PEM  string   `json:"pem"`
		Pins []string `json:"pins"`
	}

	AuditRequest struct {
		Since time.Time `json:"since"`
		Limit int       `json:"limit"`
	}
	// AuditResult is the entries asked for, as many as fit one reply
	// (MaxReply), each text cut at MaxAuditText; More says some were left
	// out to fit: ask again from the last one's time.
	AuditResult struct {
		Entries []AuditEntry `json:"entries"`
		More    bool         `json:"more,omitempty"`
	}
	AuditEntry struct {
		Time     time.Time `json:"time"`
		Operator string    `json:"operator"`
		Verb     string    `json:"verb"`
		Args     string    `json:"args"`
		Outcome  string    `json:"outcome"`
	}
)
