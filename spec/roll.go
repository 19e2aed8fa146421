package spec

import "time"

// A roll sends a release to nodes one at a time (mesh release roll): each
// node's declaration carries the release as its binary resource, and the
// next node is sent only once this one's heartbeats report the digest.
// The controller's own node goes last. A node that reports a fallback of
// the digest, or does not report it within the deadline, halts the roll.

// A roll's states.
const (
	RollRunning = "running"
	RollHalted  = "halted"
	RollDone    = "done"
	RollAborted = "aborted"
)

// A rolled node's states.
const (
	RollPending = "pending" // not sent yet
	RollSending = "sending" // sent, waiting for its heartbeats to report the digest
	RollHealthy = "healthy" // reports the digest
	RollFailed  = "failed"  // fell back, did not report in time, or could not be sent
	RollSkipped = "skipped" // cannot run the release (its architecture), or gone
)

// DefaultHealthyWithin is how long a rolled node has to report the digest.
const DefaultHealthyWithin = 60 * time.Second

// MaxHealthyWithin bounds --healthy-within.
const MaxHealthyWithin = 24 * time.Hour

// Roll is a roll as the operator API shows it.
type Roll struct {
	ID              int64      `json:"id"`
	Digest          string     `json:"digest"`
	HealthyWithinMS int64      `json:"healthy_within_ms"`
	State           string     `json:"state"`
	Cause           string     `json:"cause,omitempty"`
	Started         time.Time  `json:"started"`
	Ended           *time.Time `json:"ended,omitempty"`
	Nodes           []RollNode `json:"nodes"`
}

// RollNode is one node of a roll.
type RollNode struct {
	Node    string     `json:"node"`
	State   string     `json:"state"`
	Cause   string     `json:"cause,omitempty"`
	Started *time.Time `json:"started,omitempty"`
	Ended   *time.Time `json:"ended,omitempty"`
}

type (
	// ReleaseRollRequest starts a roll of the release Digest over Nodes
	// (every node when empty), each given HealthyWithinMS (0: the
	// default) to report it.
	ReleaseRollRequest struct {
		Digest          string   `json:"digest"`
		Nodes           []string `json:"nodes,omitempty"`
		HealthyWithinMS int64    `json:"healthy_within_ms,omitempty"`
	}
	// ReleaseRollResumeRequest resumes the halted roll: its failed node is
	// sent again, with a new deadline.
	ReleaseRollResumeRequest struct{}
	// ReleaseRollAbortRequest ends the running or halted roll: no node
	// not yet sent is sent.
	ReleaseRollAbortRequest struct{}
	// ReleaseRollShowRequest asks for the roll numbered ID (0: the latest).
	ReleaseRollShowRequest struct {
		ID int64 `json:"id,omitempty"`
	}
	// ReleaseRollResult is the roll as it stands. Reverted, of an abort,
	// are the nodes sent the release that did not report it healthy: each
	// is declared again the binary it had before the roll (or none), and
	// sent that.
	ReleaseRollResult struct {
		Roll     Roll       `json:"roll"`
		Reverted []PushNode `json:"reverted,omitempty"`
	}
)

// Finished says whether a roll in state has stopped for good or is halted:
// nothing moves until an operator resumes it.
func (r Roll) Finished() bool { return r.State != RollRunning }
