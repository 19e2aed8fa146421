package mesh

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// CSRVerb is how a node's certificate request is named in the audit.
const CSRVerb = "node.csr"

// onCSR signs a node's certificate request for the names that node may hold
// (heldNames), and answers with the chain, only under the node's own inbox.
// Every request is audited as the node's ("node:NAME"); a refusal (a name
// it may not hold, a weak key, a CSR that does not parse or verify, an
// oversized request) is counted in mesh_csr_refused_total and names why.
func (c *Controller) onCSR(ctx context.Context, m *nats.Msg, who requester) {
	if !c.allowReply(m, who) {
		return
	}
	node := who.name
	res, names, serial, err := c.signCSR(ctx, node, m.Data)
	args := map[string]any{"names": names}
	outcome := "ok"
	switch {
	case err == nil:
		c.metrics.certsIssued.Add(1)
		args["serial"] = serial
		c.log.Info("certificate issued", "node", node, "names", names, "serial", serial)
	case spec.KindOf(err) == spec.ReplyFailed:
		outcome = err.Error()
		c.log.Error("certificate request failed", "node", node, "names", names, "err", err)
	default:
		outcome = err.Error()
		c.metrics.csrRefused.Add(1)
		if ok, held := c.dropLog.allow("csr/"+node, c.cfg.Now()); ok {
			c.log.Warn("certificate request refused", "node", node, "names", names, "err", err, "refused_unlogged_before", held)
		}
	}
	c.auditor.keepAudit(ctx, store.AuditEntry{At: c.cfg.Now(), Operator: "node:" + node, Verb: CSRVerb, Args: auditJSON(args),
		Outcome: spec.Clip(outcome, spec.MaxAuditText)})
	c.respond(m, who, spec.EncodeReply(res, err))
}

// signCSR checks node's request data and signs it. It returns the names
// asked for (as far as they were read) and the leaf's serial with the
// result. Its errors are the caller's (the request does not parse), refused
// (the node may not have it) or the controller's failure (a read failed:
// never taken for "the node may hold nothing").
func (c *Controller) signCSR(ctx context.Context, node string, data []byte) (spec.CSRResult, []string, string, error) {
	if len(data) > spec.MaxCSR {
		return spec.CSRResult{}, nil, "", callerError(fmt.Sprintf("the certificate request is %d bytes, more than the %d one may take", len(data), spec.MaxCSR))
	}
	var req spec.CSRRequest
	if err := spec.Decode(data, &req); err != nil {
		return spec.CSRResult{}, nil, "", callerError(fmt.Sprintf("malformed certificate request: %v", err))
	}
	der, err := req.DER()
	if err != nil {
		return spec.CSRResult{}, nil, "", callerError(err.Error())
	}
	csr, err := ca.ParseCSR(der)
	var weak *ca.KeyError
	switch {
	case errors.As(err, &weak):
		return spec.CSRResult{}, nil, "", refusedError(weak.Error())
	case err != nil:
		return spec.CSRResult{}, nil, "", callerError(err.Error())
	}
	names := csr.DNSNames
	if len(names) > spec.MaxCSRNames {
		return spec.CSRResult{}, names[:spec.MaxCSRNames], "", callerError(fmt.Sprintf("the CSR asks for %d names, more than the %d one may", len(names), spec.MaxCSRNames))
	}
	if err := onlyDNSNames(csr); err != nil {
		return spec.CSRResult{}, names, "", err
	}
	held, err := c.certs.heldNames(ctx, node)
	if err != nil {
		return spec.CSRResult{}, names, "", err
	}
	var public []string
	for _, name := range names {
		if !held[name] {
			return spec.CSRResult{}, names, "", refusedError(fmt.Sprintf("node %q may not hold %s: a node holds %s, ROUTE.%s for the routes its modules serve, and the public names assigned to it",
				node, name, spec.NodeName(node), spec.NodeName(node)))
		}
		if !ca.Permits([]string{spec.Domain}, name) {
			public = append(public, name)
		}
	}
	if len(public) > 0 {
		ds, err := c.deps.DB.CADomains(ctx)
		if err != nil {
			return spec.CSRResult{}, names, "", fmt.Errorf("read the domains the mesh signs for: %w", err)
		}
		for _, name := range public {
			if !ca.Permits(domainNames(ds), name) {
				return spec.CSRResult{}, names, "", refusedError(fmt.Sprintf("%s is not under a domain the mesh signs for: the operator declares it with mesh ca domain add", name))
			}
		}
	}
	now := c.cfg.Now()
	leaf, err := c.deps.CA.SignCSR(csr, names, now, c.cfg.CertLifetime)
	var outside *ca.ConstraintError
	if errors.As(err, &outside) {
		return spec.CSRResult{}, names, "", refusedError(err.Error())
	}
	if err != nil {
		return spec.CSRResult{}, names, "", err
	}
	serial := ca.SerialOf(leaf.Cert)
	if err := c.deps.DB.RecordCert(ctx, store.Cert{Serial: serial, Node: node, Names: names, NotAfter: leaf.Cert.NotAfter, Issued: now}); err != nil {
		return spec.CSRResult{}, names, "", err // not handed out: unrecorded, the leaf is not used
	}
	return spec.CSRResult{Chain: leaf.Chain}, names, serial, nil
}

// onlyDNSNames refuses a CSR that asks for no name, for a name twice, or
// for anything but DNS names.
func onlyDNSNames(csr *x509.CertificateRequest) error {
	if len(csr.DNSNames) == 0 {
		return callerError("the CSR asks for no DNS name")
	}
	if len(csr.IPAddresses) > 0 || len(csr.EmailAddresses) > 0 || len(csr.URIs) > 0 {
		return refusedError("the CSR asks for IP addresses, e-mail addresses or URIs: the mesh signs DNS names only")
	}
	sorted := slices.Clone(csr.DNSNames)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(csr.DNSNames) {
		return callerError("the CSR names a DNS name twice")
	}
	return nil
}
