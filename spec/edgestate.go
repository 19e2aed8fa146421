package spec

import (
	"fmt"
	"time"
)

// KindEdgeState is the kind of an edge's report of its public names
// (EdgeState), on NodeSubject(node, KindEdgeState).
const KindEdgeState = "edge"

// The bounds of an edge's report. A node is not trusted: a report past
// them is refused whole, and each text is clipped as the controller keeps
// it.
const (
	// MaxEdgeNames is the most public names one report carries: the
	// host sends the first by name and counts the rest in Omitted. Each
	// name's entry is under a kilobyte, so a full report is well under
	// MaxPayload.
	MaxEdgeNames = 2048
	// MaxEdgeText caps a name's error as the host sends it and the
	// controller keeps it, in encoded JSON bytes: an ACME problem's
	// detail is a sentence or two.
	MaxEdgeText = 512
)

// EdgeStateEvery is how often a host sends its edge's report when nothing
// changed: a controller started again learns it within this, if not at
// once from the host's reconnection.
const EdgeStateEvery = 3 * time.Minute

// States of a public name's certificate on an edge.
const (
	// EdgeObtaining: no certificate yet, one is being obtained.
	EdgeObtaining = "obtaining"
	// EdgeValid: a certificate is held and has not expired; Error may
	// still say why its renewal failed.
	EdgeValid = "valid"
	// EdgeFailed: no certificate, and the last attempt failed (Error).
	EdgeFailed = "failed"
	// EdgeExpired: the certificate held has expired and none replaced
	// it yet.
	EdgeExpired = "expired"
)

// EdgeState is what a host reports of the edge it runs, on
// mesh.node.<node>.edge, when it changes (at most every few seconds),
// when it connects again and every EdgeStateEvery: for each public name
// it serves, its certificate and the last ACME failure. Edge "" says it
// runs none.
type EdgeState struct {
	Node string    `json:"node"`
	Time time.Time `json:"time"`
	// Edge is the name of the edge resource the host runs ("": none).
	Edge  string     `json:"edge,omitempty"`
	Names []EdgeName `json:"names,omitempty"`
	// Omitted counts the names past MaxEdgeNames left out.
	Omitted int `json:"omitted,omitempty"`
}

// EdgeName is one public name on an edge: its certificate's state and
// expiry, and the last failure to obtain or renew it (cleared once one
// succeeds), when it was and when certmagic tries again (zero: it does
// not by itself).
type EdgeName struct {
	Name     string    `json:"name"`
	State    string    `json:"state"`
	NotAfter time.Time `json:"not_after,omitzero"`
	Error    string    `json:"error,omitempty"`
	ErrorAt  time.Time `json:"error_at,omitzero"`
	Retry    time.Time `json:"retry,omitzero"`
}

// Check refuses a report that no host sends: an edge name that is not a
// DNS label, more than MaxEdgeNames names or a negative count omitted, a
// name that is not a domain name or is listed twice, a state not one of
// the four. Texts are clipped by the receiver (Clip, MaxEdgeText).
func (s EdgeState) Check() error {
	if s.Edge != "" {
		if err := CheckName("edge", s.Edge); err != nil {
			return err
		}
	}
	if s.Edge == "" && len(s.Names) > 0 {
		return fmt.Errorf("%d names and no edge running", len(s.Names))
	}
	if len(s.Names) > MaxEdgeNames {
		return fmt.Errorf("%d names, more than %d", len(s.Names), MaxEdgeNames)
	}
	if s.Omitted < 0 || s.Omitted > MaxRoster {
		return fmt.Errorf("omitted %d: not a count of names a roster holds", s.Omitted)
	}
	seen := make(map[string]bool, len(s.Names))
	for _, n := range s.Names {
		if len(n.Name) > 253 {
			return fmt.Errorf("a public name of %d bytes: a domain name holds at most 253", len(n.Name))
		}
		if err := CheckDomain(n.Name); err != nil {
			return fmt.Errorf("a public name: %w", err)
		}
		if seen[n.Name] {
			return fmt.Errorf("public name %s is listed twice", n.Name)
		}
		seen[n.Name] = true
		switch n.State {
		case EdgeObtaining, EdgeValid, EdgeFailed, EdgeExpired:
		default:
			return fmt.Errorf("public name %s: state %q is none of %s, %s, %s, %s", n.Name, Clip(n.State, 32), EdgeObtaining, EdgeValid, EdgeFailed, EdgeExpired)
		}
	}
	return nil
}
