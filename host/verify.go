package host

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
)

// verdict is what the host makes of one delivered declaration.
type verdict int

const (
	accept    verdict = iota // keep it and apply it
	duplicate                // the kept declaration again: ack, apply nothing
	refuse                   // refuse it, saying why
)

// kept is what verification compares a delivery against.
type kept struct {
	mesh, node string
	key        ed25519.PublicKey
	seq        uint64
	raw        []byte
	// root is the mesh's root the host pinned: a declaration's CA chain
	// must verify against it.
	root *x509.Certificate
}

// verifyPreview checks a dry-run declaration: signed, for this node and
// mesh, in preview mode, not expired. Its sequence is not checked: a preview
// is never kept.
func verifyPreview(raw []byte, sigHeader string, k kept, now time.Time) (spec.Declaration, string) {
	var decl spec.Declaration
	if len(raw) > spec.MaxDeclaration {
		return decl, fmt.Sprintf("the preview is %d bytes, over the %d-byte cap", len(raw), spec.MaxDeclaration)
	}
	sig, err := base64.StdEncoding.DecodeString(sigHeader)
	if err != nil || !ed25519.Verify(k.key, raw, sig) {
		return decl, "the preview's signature does not verify against the controller's key"
	}
	if reason := protocolRefused(raw); reason != "" {
		_ = json.Unmarshal(raw, &decl) // as far as it reads, for the report
		return decl, reason
	}
	if err := spec.Decode(raw, &decl); err != nil {
		return decl, fmt.Sprintf("the preview does not decode: %v", err)
	}
	switch {
	case decl.Node != k.node || decl.Mesh != k.mesh:
		return decl, fmt.Sprintf("the preview is for node %q of mesh %q", decl.Node, decl.Mesh)
	case decl.Mode != spec.ModePreview:
		return decl, "a declaration to apply never arrives on the preview subject"
	case now.After(decl.Expires.Add(spec.ClockSkew)):
		return decl, "the preview expired"
	}
	if _, reason := chainOf(decl, k.root, now); reason != "" {
		return decl, reason
	}
	return decl, ""
}

// chainOf is the CA chain decl carries, each intermediate checked against
// root (nil: it carries none, and the host keeps what it holds), or why it
// is refused. The signature covers the chain as it covers every byte; the
// root is checked besides, so that even the controller's signing key
// cannot have a host hold an intermediate of another authority.
func chainOf(decl spec.Declaration, root *x509.Certificate, now time.Time) ([]*x509.Certificate, string) {
	if decl.CAChain == "" {
		return nil, ""
	}
	chain, err := ca.ParseChain([]byte(decl.CAChain), root, now)
	if err != nil {
		return nil, fmt.Sprintf("the declaration's CA chain: %v", err)
	}
	return chain, ""
}

// verify checks one delivery: open, then judge against what is kept.
func verify(raw []byte, sigHeader string, k kept, now time.Time) (spec.Declaration, verdict, string) {
	decl, reason := open(raw, sigHeader, k.key, spec.Decode)
	if reason != "" {
		return decl, refuse, reason
	}
	v, reason := judge(decl, raw, k, now)
	if v == accept {
		if _, reason := chainOf(decl, k.root, now); reason != "" {
			return decl, refuse, reason
		}
	}
	return decl, v, reason
}

// open checks what needs no kept state, in this order: the size cap, then
// the signature over the raw bytes, then the protocol (another refused,
// whatever else it holds), and only then decodes them (strictly,
// with decode: unknown fields refused), once. A refusal returns the reason;
// decl is filled as far as it could be read.
func open(raw []byte, sigHeader string, key ed25519.PublicKey, decode func([]byte, any) error) (spec.Declaration, string) {
	var decl spec.Declaration
	if len(raw) > spec.MaxDeclaration {
		return decl, fmt.Sprintf("the declaration is %d bytes, over the %d-byte cap", len(raw), spec.MaxDeclaration)
	}
	sig, err := base64.StdEncoding.DecodeString(sigHeader)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return decl, "no valid " + spec.SigHeader + " header: the declaration is unsigned"
	}
	if !ed25519.Verify(key, raw, sig) {
		return decl, "the signature does not verify against the controller's key"
	}
	if reason := protocolRefused(raw); reason != "" {
		_ = json.Unmarshal(raw, &decl) // as far as it reads, for the report
		return decl, reason
	}
	if err := decode(raw, &decl); err != nil {
		return decl, fmt.Sprintf("the declaration does not decode: %v", err)
	}
	return decl, ""
}

// judge is what an opened declaration is to a host keeping k: another
// node's or mesh's declaration, a sequence lower than the one kept, and the
// kept sequence with other bytes are refused, the kept one again is a
// duplicate; then an expiry passed (on arrival only) or an issue time in
// the future are refused. The sequence is judged before the expiry, so the
// kept declaration delivered again after it expired is a duplicate.
func judge(decl spec.Declaration, raw []byte, k kept, now time.Time) (verdict, string) {
	switch {
	case decl.Node != k.node:
		return refuse, fmt.Sprintf("the declaration is for node %q, not %q", decl.Node, k.node)
	case decl.Mesh != k.mesh:
		return refuse, fmt.Sprintf("the declaration is for mesh %q, not %q", decl.Mesh, k.mesh)
	case decl.Mode != spec.ModeApply:
		return refuse, fmt.Sprintf("a %q declaration never arrives on the delivery subject", decl.Mode)
	}
	return judgeSequence("declaration", "sequence", sequenced{decl.Seq, raw, decl.Issued, decl.Expires}, k.seq, k.raw, now)
}

// sequenced is what the sequence rules read of a signed message.
type sequenced struct {
	seq             uint64
	raw             []byte
	issued, expires time.Time
}

// judgeSequence is the rules a declaration and a roster share once their
// identity is checked: a sequence lower than the kept one is refused, the
// kept sequence is a duplicate with the kept bytes and refused with other
// bytes; then an expiry passed or an issue time in the future is refused.
// noun and seqWord name the message in the reasons.
func judgeSequence(noun, seqWord string, m sequenced, keptSeq uint64, keptRaw []byte, now time.Time) (verdict, string) {
	switch {
	case m.seq < keptSeq:
		return refuse, fmt.Sprintf("%s %d is lower than the kept %d", seqWord, m.seq, keptSeq)
	case m.seq == keptSeq && bytes.Equal(m.raw, keptRaw):
		return duplicate, ""
	case m.seq == keptSeq:
		return refuse, fmt.Sprintf("%s %d is the kept one, with different bytes", seqWord, m.seq)
	case now.After(m.expires.Add(spec.ClockSkew)):
		return refuse, fmt.Sprintf("the %s expired at %s", noun, m.expires.UTC().Format(time.RFC3339))
	case m.issued.After(now.Add(spec.ClockSkew)):
		return refuse, fmt.Sprintf("the %s was issued at %s, in the future of this machine's clock", noun, m.issued.UTC().Format(time.RFC3339))
	}
	return accept, ""
}
