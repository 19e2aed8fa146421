package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// Limits on the wire (docs/design.md, "Decisions already taken": on the wire).
const (
	// MaxDeclaration is the cap on a declaration's signed bytes.
	MaxDeclaration = 1 << 20
	// InlineMax is the largest file content carried inside a declaration;
	// anything larger travels as a blob fetched by digest.
	InlineMax = 64 << 10
	// BlobChunk is the size of one blob chunk on the bus.
	BlobChunk = 512 << 10
	// SigHeader carries the detached ed25519 signature, base64.
	SigHeader = "Mesh-Sig"
	// DefaultExpiry is how long a declaration may be applied after it is issued.
	DefaultExpiry = 24 * time.Hour
	// ClockSkew is the skew allowed between controller and host clocks.
	ClockSkew = 5 * time.Minute
)

// Modes of a declaration.
const (
	ModeApply   = ""        // apply and keep
	ModePreview = "preview" // work out what would change; never stored, acked or applied
)

// Declaration is everything one node should hold, numbered and signed by the
// controller. Its encoded bytes are exactly what is signed.
type Declaration struct {
	Mesh      string    `json:"mesh"`
	Node      string    `json:"node"`
	Seq       uint64    `json:"seq"`
	Issued    time.Time `json:"issued"`
	Expires   time.Time `json:"expires"`
	Protocol  int       `json:"protocol"`
	Mode      string    `json:"mode,omitempty"`
	Resources Resources `json:"resources"`
	// RosterRef names the roster message this declaration was composed
	// with: the host applies it only against that roster or a later one.
	RosterRef *RosterRef `json:"roster_ref,omitempty"`
	// CAChain is the mesh's intermediate that signs now, PEM, first; any
	// other intermediate the host should hold follows it. The same in
	// every node's declaration. The host refuses a declaration whose chain
	// does not verify against the root it pinned, and keeps the last chain
	// given beside that root. Empty: the host keeps what it holds.
	CAChain string `json:"ca_chain,omitempty"`
}

// Mode is a Unix permission mode (07777 at most), written in JSON as an
// octal string ("0644").
type Mode uint32

// MarshalJSON writes the mode as "0644".
func (m Mode) MarshalJSON() ([]byte, error) { return json.Marshal(fmt.Sprintf("%04o", uint32(m))) }

// UnmarshalJSON reads an octal string of at most 07777.
func (m *Mode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("mode must be an octal string such as \"0644\"")
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 || s == "" {
		return fmt.Errorf("mode %q is not an octal mode from 0000 to 7777", s)
	}
	*m = Mode(v)
	return nil
}

// CheckFile refuses a file mode that is setuid or setgid and writable by
// anyone: anyone on the machine could replace a program that runs with its
// owner's or its group's rights.
func (m Mode) CheckFile() error {
	if m&0o6000 != 0 && m&0o002 != 0 {
		return fmt.Errorf("mode %04o is setuid or setgid and writable by anyone, so anyone could replace a program that runs with its owner's or group's rights: drop the s bit or o+w (such as %04o)", uint32(m), uint32(m&^0o002))
	}
	return nil
}

// ContentDigest is "sha256:HEX" of b.
func ContentDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Content is a source as a manifest's resolution reads it: its size and
// digest, and its bytes when it is small enough to travel inline (InlineMax
// or less). A larger one travels as a blob, its bytes read again, a chunk
// at a time, when it is uploaded, so no side holds it whole.
type Content struct {
	Size   int64
	Digest string
	Data   []byte // the bytes when Size <= InlineMax; nil otherwise
}

// ContentOf is b as a Content.
func ContentOf(b []byte) Content {
	c := Content{Size: int64(len(b)), Digest: ContentDigest(b)}
	if c.Size <= InlineMax {
		c.Data = b
	}
	return c
}

// CheckPath refuses a path that is not absolute and clean, or is the root.
func CheckPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is not absolute", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean (it should read %q)", p, path.Clean(p))
	case p == "/":
		return fmt.Errorf("path %q is the root directory", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q holds a NUL byte", p)
	}
	return nil
}

// Outcomes of one resource in a report.
const (
	Created   = "created"
	Changed   = "changed"
	Unchanged = "unchanged"
	Removed   = "removed"
	Failed    = "failed"
)

// Report is what a host says after it handled a declaration: each
// resource's outcome, or why the whole declaration was refused. Published on
// mesh.node.<node>.report.
type Report struct {
	Node string    `json:"node"`
	Time time.Time `json:"time"`
	Seq  uint64    `json:"seq"`
	// Digest is the SHA-256 of the declaration's signed bytes.
	Digest string `json:"digest"`
	// Refused, when set, says why nothing was applied.
	Refused string `json:"refused,omitempty"`
	// Waiting, when set, says that the declaration was not applied yet
	// because the host has not got the roster it names (it asked for it,
	// and takes the declaration when the roster arrives).
	Waiting string `json:"waiting,omitempty"`
	// Unkept, when set, says why the host could not keep the declaration
	// (write it to its disk: full, failing): nothing of it was applied,
	// and the host asks for it again.
	Unkept string `json:"unkept,omitempty"`
	// Reconcile is set on a report of a periodic pass that corrected drift.
	Reconcile bool `json:"reconcile,omitempty"`
	Preview   bool `json:"preview,omitempty"`
	// Writes counts the changing calls the apply made, to the filesystem
	// and to the container engine: zero when nothing differed.
	Writes int `json:"writes"`
	// ApplyMicros is how long the apply took, in microseconds.
	ApplyMicros int64            `json:"apply_us,omitempty"`
	Results     []ResourceResult `json:"results"`
	// Omitted counts the results the controller did not keep: a report is
	// kept within MaxReportResults and MaxReportKept (a host sends none).
	Omitted int `json:"omitted,omitempty"`
}

// ReportAck answers a report on
// ReportAckSubject: the controller holds it, recorded or refused for
// good, so the host need not send it again. Seq and Time name the report.
type ReportAck struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
}

// ResourceResult is one resource's outcome.
type ResourceResult struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// Note says more of a change: a container started again at reconcile,
	// and why it had stopped.
	Note string `json:"note,omitempty"`
}

// BlobRequest asks the controller for one chunk of a blob the node's
// declaration names, on mesh.node.<node>.blob.
type BlobRequest struct {
	Digest string `json:"digest"`
	Offset int64  `json:"offset"`
}

// BlobChunkReply is one chunk; Data is empty past the end.
type BlobChunkReply struct {
	Size int64  `json:"size"`
	Data []byte `json:"data"`
}
