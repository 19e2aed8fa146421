package host

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"time"

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
	return decl, ""
}

// verify checks one delivery: the size cap, then the signature over the raw
// bytes, and only then what the bytes say: unknown fields, another node's or
// mesh's declaration, a sequence lower than the one kept, the kept sequence
// with other bytes, an expiry passed (on arrival only). A refusal returns
// the reason; decl is filled as far as it could be read.
func verify(raw []byte, sigHeader string, k kept, now time.Time) (spec.Declaration, verdict, string) {
	var decl spec.Declaration
	if len(raw) > spec.MaxDeclaration {
		return decl, refuse, fmt.Sprintf("the declaration is %d bytes, over the %d-byte cap", len(raw), spec.MaxDeclaration)
	}
	sig, err := base64.StdEncoding.DecodeString(sigHeader)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return decl, refuse, "no valid " + spec.SigHeader + " header: the declaration is unsigned"
	}
	if !ed25519.Verify(k.key, raw, sig) {
		return decl, refuse, "the signature does not verify against the controller's key"
	}
	if err := spec.Decode(raw, &decl); err != nil {
		return decl, refuse, fmt.Sprintf("the declaration does not decode: %v", err)
	}
	switch {
	case decl.Node != k.node:
		return decl, refuse, fmt.Sprintf("the declaration is for node %q, not %q", decl.Node, k.node)
	case decl.Mesh != k.mesh:
		return decl, refuse, fmt.Sprintf("the declaration is for mesh %q, not %q", decl.Mesh, k.mesh)
	case decl.Mode != spec.ModeApply:
		return decl, refuse, fmt.Sprintf("a %q declaration never arrives on the delivery subject", decl.Mode)
	case decl.Seq < k.seq:
		return decl, refuse, fmt.Sprintf("sequence %d is lower than the kept %d", decl.Seq, k.seq)
	case decl.Seq == k.seq && bytes.Equal(raw, k.raw):
		return decl, duplicate, ""
	case decl.Seq == k.seq:
		return decl, refuse, fmt.Sprintf("sequence %d is the kept one, with different bytes", decl.Seq)
	case now.After(decl.Expires.Add(spec.ClockSkew)):
		return decl, refuse, fmt.Sprintf("the declaration expired at %s", decl.Expires.UTC().Format(time.RFC3339))
	case decl.Issued.After(now.Add(spec.ClockSkew)):
		return decl, refuse, fmt.Sprintf("the declaration was issued at %s, in the future of this machine's clock", decl.Issued.UTC().Format(time.RFC3339))
	}
	return decl, accept, ""
}
