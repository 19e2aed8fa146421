package host

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mesh-fleet/mesh/internal/safefile"
	"github.com/mesh-fleet/mesh/spec"
)

// Files under the host's directory (D/host).
const (
	StateFile = "state.json"
	CredsFile = "node.creds"
	// RosterFile holds the roster message the host holds, apart from
	// state.json: a roster is O(fleet) bytes and changes when the roster
	// does, a state is O(node) and changes at every delivery, so a push
	// that changes one module does not have every host write the whole
	// roster again.
	RosterFile = "roster.json"
)

// State is what a host must never forget. It is written atomically and its
// directory synced.
type State struct {
	Mesh string `json:"mesh"`
	Node string `json:"node"`
	// Address is where other nodes reach this one, as enrolled: where its
	// containers' ports are published.
	Address string `json:"address,omitempty"`
	// Bus is where the controller's bus is reached (nats URLs).
	Bus []string `json:"bus"`
	// CAPin is the pin of the mesh's root ("sha256:..."), and CARoot the
	// root itself, PEM, checked against the pin when it was first received.
	CAPin  string `json:"ca_pin"`
	CARoot string `json:"ca_root"`
	// CAChain is the mesh's intermediates as the last declaration that
	// carried them gave them, PEM, the one that signs first: held beside
	// the pinned root wherever the host checks a chain. Empty until a
	// declaration carries one.
	CAChain string `json:"ca_chain,omitempty"`
	// SignKey is the controller's ed25519 public key, base64, that every
	// declaration must be signed with.
	SignKey string `json:"sign_key"`
	// Seq is the highest sequence accepted, kept before anything of it is
	// applied; Declaration and Signature are its exact bytes.
	Seq         uint64 `json:"seq"`
	Declaration []byte `json:"declaration,omitempty"`
	Signature   []byte `json:"signature,omitempty"`
	// Applied is what the host holds because of its applies, which is
	// what it removes when a later declaration no longer names it; it is
	// written whenever it changes. AppliedSeq is the sequence whose apply
	// finished, as of the last write: an apply that leaves the record as
	// it was does not write it alone (a stop does), so after a crash it may
	// be below Seq while the record is whole. The start applies the kept
	// declaration again whatever it says.
	AppliedSeq uint64    `json:"applied_seq"`
	Applied    []Applied `json:"applied"`
	// Roster and RosterSig are the roster message the host holds (the
	// highest accepted: its names are what the resolver serves), its
	// exact signed bytes and signature, kept before the names are served.
	// They live in RosterFile (WriteRoster); ReadState reads them from
	// there, or from state.json as earlier hosts kept them,
	// and WriteState moves them to RosterFile the first time it writes.
	Roster    []byte `json:"roster,omitempty"`
	RosterSig []byte `json:"roster_sig,omitempty"`
}

// rosterKept is RosterFile's content: the signature, and the roster's
// signed bytes as they are (JSON in JSON: readable with jq, and a quarter
// smaller than base64).
type rosterKept struct {
	Sig    []byte          `json:"sig"`
	Roster json.RawMessage `json:"roster"`
}

// ReadState reads the host's state and seed from dir.
func ReadState(dir string) (State, []byte, error) {
	var st State
	body, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return State{}, nil, fmt.Errorf("read host state: %w", err)
	}
	if err := spec.Decode(body, &st); err != nil {
		return State{}, nil, fmt.Errorf("read host state %s: %w", filepath.Join(dir, StateFile), err)
	}
	switch body, err := os.ReadFile(filepath.Join(dir, RosterFile)); {
	case err == nil:
		var r rosterKept
		if err := spec.Decode(body, &r); err != nil {
			return State{}, nil, fmt.Errorf("read kept roster %s: %w", filepath.Join(dir, RosterFile), err)
		}
		st.Roster, st.RosterSig = r.Roster, r.Sig
	case !errors.Is(err, os.ErrNotExist):
		return State{}, nil, fmt.Errorf("read kept roster: %w", err)
	}
	seed, err := os.ReadFile(filepath.Join(dir, CredsFile))
	if err != nil {
		return State{}, nil, fmt.Errorf("read node credential: %w", err)
	}
	return st, []byte(strings.TrimSpace(string(seed))), nil
}

// Init makes dir (0700) a host's directory: its credential (0600) and its
// state. A dir that already holds a state is refused.
func Init(dir string, st State, seed []byte) error {
	if err := spec.CheckName("node", st.Node); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err == nil {
		return fmt.Errorf("%s already holds a host's state", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("look for a host state in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create host directory: %w", err)
	}
	if err := safefile.WriteFile(filepath.Join(dir, CredsFile), append(append([]byte(nil), seed...), '\n'), 0o600); err != nil {
		return fmt.Errorf("write node credential: %w", err)
	}
	// A roster left without its state (a join cut short, a state removed
	// by hand) is no roster of this host's.
	if err := os.Remove(filepath.Join(dir, RosterFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove a kept roster left without its state: %w", err)
	}
	return WriteState(dir, st)
}

// WriteState writes st to dir atomically, compact: indenting would be
// most of the encoding's cost, and what it holds is mostly base64 (the
// declaration's bytes) that indentation does not make readable. The
// roster is not written (WriteRoster does), except to RosterFile when
// that is missing: a state.json that holds its roster inside loses it
// only once it is kept beside.
func WriteState(dir string, st State) error {
	if len(st.Roster) > 0 {
		switch _, err := os.Stat(filepath.Join(dir, RosterFile)); {
		case errors.Is(err, os.ErrNotExist):
			if err := WriteRoster(dir, st.Roster, st.RosterSig); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("look for the kept roster: %w", err)
		}
	}
	st.Roster, st.RosterSig = nil, nil
	body, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode host state: %w", err)
	}
	if err := safefile.WriteFile(filepath.Join(dir, StateFile), append(body, '\n'), 0o600); err != nil {
		return fmt.Errorf("write host state: %w", err)
	}
	return nil
}

// WriteRoster writes the roster message held (its signed bytes and
// signature) to dir atomically.
func WriteRoster(dir string, raw, sig []byte) error {
	// By hand: json.Marshal would compact raw, and the signature is over
	// its exact bytes.
	if !json.Valid(raw) {
		return errors.New("encode kept roster: its bytes are not JSON")
	}
	body := make([]byte, 0, len(raw)+base64.StdEncoding.EncodedLen(len(sig))+32)
	body = append(body, `{"sig":"`...)
	body = base64.StdEncoding.AppendEncode(body, sig)
	body = append(body, `","roster":`...)
	body = append(body, raw...)
	body = append(body, '}')
	if err := safefile.WriteFile(filepath.Join(dir, RosterFile), append(body, '\n'), 0o600); err != nil {
		return fmt.Errorf("write kept roster: %w", err)
	}
	return nil
}
