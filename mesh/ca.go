package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// Certificate lifetimes of leaves signed for nodes.
const (
	DefaultCertLifetime = 30 * 24 * time.Hour
	// MinCertLifetime is the shortest lifetime the controller takes: a
	// test's renewals run in seconds.
	MinCertLifetime = time.Minute
	// CertWarning is how long before it expires a node's latest leaf for a
	// name it holds makes status a failure (status says "a week"): it was
	// not renewed.
	CertWarning = 7 * 24 * time.Hour
)

// MeshDomains are what the mesh's intermediate always permits, whatever the
// operator declares: the mesh's own names (.internal) and the name the
// bus's certificate carries (spec.BusTLSName), which every host verifies.
// IP addresses are not constrained: the bus's certificate names its own.
func MeshDomains() []string { return []string{spec.Domain, spec.BusTLSName} }

// Constraints are the DNS domains the intermediate is constrained to: the
// mesh's own and the declared ones.
func Constraints(declared []string) []string {
	return append(MeshDomains(), declared...)
}

func domainNames(ds []store.CADomain) []string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	return names
}

// addCADomain declares a public domain: the intermediate is issued anew
// under the same root with it among its constraints. The change is made in
// an order that a retry finishes: the new intermediate is written aside
// (not yet signing), the domain recorded, then the intermediate made
// current in one rename. A failure before the record changes nothing; one
// after it leaves the domain recorded and not signed, which mesh ca domain
// list shows and the same add finishes.
func (cs *certs) addCADomain(ctx context.Context, req spec.CADomainAddRequest) (spec.CADomainAddResult, error) {
	if err := spec.CheckCADomain(req.Domain); err != nil {
		return spec.CADomainAddResult{}, callerError(err.Error())
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ds, err := cs.db.CADomains(ctx)
	if err != nil {
		return spec.CADomainAddResult{}, err
	}
	declared := domainNames(ds)
	recorded := slices.Contains(declared, req.Domain)
	if recorded && slices.Contains(cs.ca.Permitted(), req.Domain) {
		return spec.CADomainAddResult{}, refusedError(fmt.Sprintf("domain %s is already declared: mesh ca domain list shows the domains", req.Domain))
	}
	if !recorded {
		declared = append(declared, req.Domain)
	}
	now := cs.now()
	p, err := cs.ca.Prepare(Constraints(declared), now)
	if err != nil {
		return spec.CADomainAddResult{}, fmt.Errorf("add domain %s: %w", req.Domain, err)
	}
	// The domain and the intermediate that signs under it are recorded in
	// one write, the key sealed: every controller takes it from the
	// store (adopt).
	in := store.Intermediate{Serial: p.Serial(), CertPEM: string(p.CertPEM()),
		KeySealed: cs.key.SealText(string(p.KeyPEM()), intermediatePlace), Set: now}
	if err := cs.db.SetIntermediate(ctx, in, req.Domain); err != nil {
		p.Discard()
		return spec.CADomainAddResult{}, fmt.Errorf("add domain %s: %w", req.Domain, err)
	}
	if err := p.Commit(); err != nil {
		p.Discard()
		return spec.CADomainAddResult{}, fmt.Errorf("add domain %s: it is recorded, but the intermediate that signs it is not in place (%w): mesh ca domain add %s again finishes it",
			req.Domain, err, req.Domain)
	}
	cs.log.Info("CA domain added: a new intermediate signs", "domain", req.Domain, "intermediate", p.Serial(), "permitted", Constraints(declared))
	list, err := cs.listCADomains(ctx, spec.CADomainListRequest{})
	if err != nil {
		return spec.CADomainAddResult{}, err
	}
	return spec.CADomainAddResult{Domains: list.Domains, Intermediate: list.Intermediate}, nil
}

// intermediatePlace is where the intermediate's key is kept sealed: its
// sealed text opens there only.
var intermediatePlace = seal.Place("CA intermediate key")

// adopt makes the intermediate the store keeps the one that signs, when
// the CA's directory holds another: one issued by the controller that led
// before, or one a crash left recorded and not in place. None kept
// (genesis's signs) changes nothing.
func (cs *certs) adopt(ctx context.Context) error {
	in, err := cs.db.Intermediate(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if in.Serial == ca.SerialOf(cs.ca.Intermediate()) {
		return nil
	}
	key, err := cs.key.OpenText(in.KeySealed, intermediatePlace)
	if err != nil {
		return fmt.Errorf("open the key of the CA's intermediate %s: %w (is D/controller/%s the key that sealed it?)", in.Serial, err, SealKeyFile)
	}
	if err := cs.ca.Adopt([]byte(in.CertPEM), []byte(key)); err != nil {
		return err
	}
	cs.log.Info("the CA's intermediate taken from the store", "intermediate", in.Serial, "permitted", cs.ca.Permitted())
	return nil
}

// listCADomains lists the declared domains and what the current
// intermediate may sign.
func (cs *certs) listCADomains(ctx context.Context, _ spec.CADomainListRequest) (spec.CADomainListResult, error) {
	ds, err := cs.db.CADomains(ctx)
	if err != nil {
		return spec.CADomainListResult{}, err
	}
	permitted := cs.ca.Permitted()
	res := spec.CADomainListResult{Domains: []spec.CADomain{}, Permitted: permitted, Intermediate: ca.SerialOf(cs.ca.Intermediate())}
	if res.Permitted == nil {
		res.Permitted = []string{}
	}
	for _, d := range ds {
		res.Domains = append(res.Domains, spec.CADomain{Name: d.Name, Added: d.Added.UTC(),
			Signed: slices.Contains(permitted, d.Name)})
	}
	return res, nil
}

// listCerts lists the leaves issued, in the order they were, as many as
// fit one reply.
func (cs *certs) listCerts(ctx context.Context, req spec.CACertsRequest) (spec.CACertsResult, error) {
	certs, next, err := fillPage(req.After,
		func(after int64, n int) ([]store.Cert, error) { return cs.db.Certs(ctx, after, n) },
		func(cert store.Cert) int64 { return cert.ID },
		func(cert store.Cert) spec.IssuedCert {
			return spec.IssuedCert{Serial: cert.Serial, Node: cert.Node, Names: cert.Names, NotAfter: cert.NotAfter.UTC(), Issued: cert.Issued.UTC()}
		})
	if err != nil {
		return spec.CACertsResult{}, err
	}
	return spec.CACertsResult{Certs: certs, Next: next}, nil
}

// expiringCerts are the lines status shows for node's leaves that were not
// renewed: for each name it holds, the latest leaf issued to it for that
// name, when that leaf expires within CertWarning of now (or has expired).
// A leaf for names it no longer holds is not its concern.
func expiringCerts(latest []store.NameCert, held map[string]bool, now time.Time) []string {
	seen := map[string]bool{}
	var due []store.Cert
	for _, nc := range latest {
		if !held[nc.Name] || seen[nc.Cert.Serial] || !nc.Cert.NotAfter.Before(now.Add(CertWarning)) {
			continue
		}
		seen[nc.Cert.Serial] = true
		due = append(due, nc.Cert)
	}
	slices.SortFunc(due, func(a, b store.Cert) int { return a.NotAfter.Compare(b.NotAfter) })
	var lines []string
	for _, cert := range due {
		when := "expires in " + cert.NotAfter.Sub(now).Round(time.Minute).String()
		if !cert.NotAfter.After(now) {
			when = "expired " + now.Sub(cert.NotAfter).Round(time.Minute).String() + " ago"
		}
		lines = append(lines, fmt.Sprintf("certificate %s for %s %s and was not renewed", cert.Serial, clipStatus(strings.Join(cert.Names, ", ")), when))
	}
	return lines
}

// certs are the CA's domains and the certificates it signed, and the
// names each node may hold one for.
type certs struct {
	base
	ca *ca.Authority
	// key seals the intermediate's key in the store.
	key      *seal.RestKey
	composer *composer
	// mu makes one change of the CA's domains at a time.
	mu sync.Mutex
}

// heldNames are the names node may hold a certificate for: NODE.internal,
// and every name it serves by its composition (ROUTE.NODE.internal, and the
// public names assigned to it), or, when its own set does not compose, by
// the declaration it last received. A read that fails is an error, never
// "it holds nothing".
func (cs *certs) heldNames(ctx context.Context, node string) (map[string]bool, error) {
	n, err := cs.db.Node(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refusedError(fmt.Sprintf("node %q is not in the mesh", node))
	}
	if err != nil {
		return nil, fmt.Errorf("work out the names node %q may hold: %w", node, err)
	}
	if !n.Removing.IsZero() {
		return nil, refusedError(fmt.Sprintf("node %q is being removed: it holds no names", node))
	}
	modules, err := cs.composer.modulesByName(ctx)
	if err != nil {
		return nil, fmt.Errorf("work out the names node %q may hold: %w", node, err)
	}
	plan, _, err := cs.composer.composeOne(ctx, n, modules)
	if err != nil {
		return nil, fmt.Errorf("work out the names node %q may hold: %w", node, err)
	}
	return namesOf(node, plan.Routes), nil
}

// namesOf is NODE.internal and the names of node's routes.
func namesOf(node string, routes []spec.RosterRoute) map[string]bool {
	held := map[string]bool{spec.NodeName(node): true}
	for _, r := range routes {
		if r.Node == node {
			held[r.Name] = true
		}
	}
	return held
}
