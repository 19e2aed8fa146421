package spec

import (
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Certificates: a node asks the controller to sign a CSR on its own subject
// (NodeSubject(node, KindCSR)), and is answered, under its own inbox, with
// the chain. The key never leaves the node. The controller signs only the
// names that node may hold: NODE.internal, ROUTE.NODE.internal for the
// routes its modules serve there, and the public names it serves.

// MaxCSR caps a CSR request's message: a CSR for a few tens of names with
// an RSA 4096 key is a few KiB, PEM or not.
const MaxCSR = 16 << 10

// MaxCSRNames caps the names one CSR may ask for.
const MaxCSRNames = 100

// CSRRequest is a node's certificate signing request: CSR holds it, PEM
// ("CERTIFICATE REQUEST") or DER.
type CSRRequest struct {
	CSR []byte `json:"csr"`
}

// DER is the request's CSR as DER bytes: the PEM block's, or CSR itself
// when it is not PEM.
func (r CSRRequest) DER() ([]byte, error) {
	if len(r.CSR) == 0 {
		return nil, errors.New("the request carries no CSR")
	}
	if !strings.HasPrefix(strings.TrimSpace(string(r.CSR[:min(len(r.CSR), 64)])), "-----BEGIN") {
		return r.CSR, nil
	}
	block, rest := pem.Decode(r.CSR)
	if block == nil {
		return nil, errors.New("the CSR looks like PEM but holds no PEM block")
	}
	if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("the CSR's PEM block is a %q, not a CERTIFICATE REQUEST", block.Type)
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errors.New("the CSR has data after its PEM block: send one CSR")
	}
	return block.Bytes, nil
}

// CSRResult is a signed leaf: Chain is the leaf and the intermediate that
// signed it, PEM-encoded, as a TLS server presents them.
type CSRResult struct {
	Chain []byte `json:"chain"`
}

// CADomain is a public domain the operator declared: the mesh's
// intermediate may sign names under it (the domain and every name below).
type CADomain struct {
	Name  string    `json:"name"`
	Added time.Time `json:"added"`
	// Signed says the current intermediate's constraints name the domain.
	// False only when an add failed half-way: adding it again finishes it.
	Signed bool `json:"signed"`
}

type (
	// CADomainAddRequest declares Domain.
	CADomainAddRequest struct {
		Domain string `json:"domain"`
	}
	// CADomainAddResult is every domain after the add, and the serial of
	// the intermediate that now signs.
	CADomainAddResult struct {
		Domains      []CADomain `json:"domains"`
		Intermediate string     `json:"intermediate"`
	}
	CADomainListRequest struct{}
	// CADomainListResult is every domain declared, by name; the mesh's own
	// (.internal) is always signed and not listed. Permitted is what the
	// current intermediate (its serial) may sign names under, the mesh's
	// own domains included; empty when it is unconstrained (a mesh created
	// before constraints: mesh ca domain add gives it a constrained one).
	CADomainListResult struct {
		Domains      []CADomain `json:"domains"`
		Permitted    []string   `json:"permitted"`
		Intermediate string     `json:"intermediate"`
	}
)

// IssuedCert is a leaf the controller signed for a node.
type IssuedCert struct {
	Serial   string    `json:"serial"` // lower-case hex
	Node     string    `json:"node"`
	Names    []string  `json:"names"`
	NotAfter time.Time `json:"not_after"`
	Issued   time.Time `json:"issued"`
}

type (
	// CACertsRequest asks for the leaves issued, in the order they were,
	// from the first after After (from the first when 0).
	CACertsRequest struct {
		After int64 `json:"after,omitempty"`
	}
	// CACertsResult lists issued leaves, as many as fit one reply. Next,
	// when set, says there are more: ask again with After set to it.
	CACertsResult struct {
		Certs []IssuedCert `json:"certs"`
		Next  int64        `json:"next,omitempty"`
	}
)

// CheckCADomain refuses a domain the operator may not declare, naming the
// rule: a DNS name of two labels or more (CheckDomain), written as the
// constraint holds it (no leading or trailing dot), and not .internal or
// anything under it, which are the mesh's own names and always signed.
func CheckCADomain(name string) error {
	bare := strings.Trim(name, ".")
	if bare == Domain || strings.HasSuffix(bare, "."+Domain) {
		return fmt.Errorf("%q: .%s and every name under it are the mesh's own names, always signed; declare only public domains", name, Domain)
	}
	if strings.HasPrefix(name, ".") {
		return fmt.Errorf("%q: write the domain without a leading dot (%s covers itself and every name below it)", name, bare)
	}
	if strings.HasSuffix(name, ".") {
		return fmt.Errorf("%q: write the domain without a trailing dot (%s)", name, bare)
	}
	if err := CheckDomain(name); err != nil {
		return fmt.Errorf("not a domain the mesh can sign for: %w", err)
	}
	return nil
}
