package mesh

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// callAPI calls verb as the CLI does and decodes the answer into res.
func callAPI(t *testing.T, nc *nats.Conn, verb string, req, res any) error {
	t.Helper()
	m, err := nc.Request(spec.APISubject(verb), mustJSON(t, req), 10*time.Second)
	if err != nil {
		t.Fatalf("call %s: %v", verb, err)
	}
	return spec.DecodeReply(m.Data, res)
}

func domainList(t *testing.T, c *Controller) spec.CADomainListResult {
	t.Helper()
	res, err := c.certs.listCADomains(context.Background(), spec.CADomainListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func intermediateFile(t *testing.T, c *Controller) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.deps.CA.Dir(), "intermediate.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCADomainAdd: mesh ca domain add issues a new intermediate under the
// same root with the domain among its constraints, and records it: a leaf
// for a name under it verifies under the new intermediate, a leaf issued
// before still verifies with the old one, and a host still connects to
// the bus and is answered.
func TestCADomainAdd(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	nc := certMesh(t, c, db)
	op := operatorConn(t, c)
	root := c.deps.CA.Root()

	before, err := askCSR(t, nc, "beta", csrBody(t, ecKey(t), "beta.internal"))
	if err != nil {
		t.Fatal(err)
	}
	old := parseChain(t, before.Chain)
	oldInter := c.deps.CA.Intermediate()

	var res spec.CADomainAddResult
	if err := callAPI(t, op, spec.CADomainAdd.Name, spec.CADomainAddRequest{Domain: "example.org"}, &res); err != nil {
		t.Fatalf("ca.domain.add example.org: %v", err)
	}
	inter := c.deps.CA.Intermediate()
	if inter.Equal(oldInter) || res.Intermediate != ca.SerialOf(inter) {
		t.Fatalf("the add answered intermediate %s; the current one is %s, the old %s", res.Intermediate, ca.SerialOf(inter), ca.SerialOf(oldInter))
	}
	if len(res.Domains) != 1 || res.Domains[0].Name != "example.org" || !res.Domains[0].Signed {
		t.Errorf("the add answered domains %+v, want example.org, signed", res.Domains)
	}
	want := []string{"internal", "mesh-bus", "example.org"}
	if !slices.Equal(inter.PermittedDNSDomains, want) {
		t.Errorf("the new intermediate permits %v, want %v", inter.PermittedDNSDomains, want)
	}
	if onDisk, err := ca.ParseCert(intermediateFile(t, c)); err != nil || !onDisk.Equal(inter) {
		t.Errorf("intermediate.crt is not the new intermediate: %v", err)
	}
	var list spec.CADomainListResult
	if err := callAPI(t, op, spec.CADomainList.Name, spec.CADomainListRequest{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Domains) != 1 || list.Domains[0].Name != "example.org" || !slices.Equal(list.Permitted, want) || list.Intermediate != res.Intermediate {
		t.Errorf("ca.domain.list = %+v", list)
	}
	if e := lastAudit(t, db); e.Verb != spec.CADomainList.Name {
		t.Errorf("the last audit entry is %+v, want the list", e)
	}

	after, err := askCSR(t, nc, "beta", csrBody(t, ecKey(t), "x.example.org"))
	if err != nil {
		t.Fatalf("beta's CSR for x.example.org after the add: %v", err)
	}
	chain := parseChain(t, after.Chain)
	if !chain[1].Equal(inter) {
		t.Error("the new leaf's chain does not carry the new intermediate")
	}
	if out, ok := opensslVerify(t, root, inter, chain[0]); !ok {
		t.Errorf("openssl does not verify x.example.org under the new intermediate:\n%s", out)
	}
	if err := goVerify(root, inter, chain[0], "x.example.org"); err != nil {
		t.Errorf("Go does not verify x.example.org under the new intermediate: %v", err)
	}
	// The old leaf, with the old intermediate its chain carries (and the
	// CA keeps): still good until it expires.
	if kept, err := os.ReadFile(filepath.Join(c.deps.CA.Dir(), "intermediates", ca.SerialOf(oldInter)+".crt")); err != nil {
		t.Errorf("the old intermediate is not kept: %v", err)
	} else if k, _ := ca.ParseCert(kept); k == nil || !k.Equal(old[1]) {
		t.Error("the kept intermediate is not the one the old leaf's chain carries")
	}
	if out, ok := opensslVerify(t, root, old[1], old[0]); !ok {
		t.Errorf("openssl no longer verifies the leaf issued before the add:\n%s", out)
	}
	if err := goVerify(root, old[1], old[0], "beta.internal"); err != nil {
		t.Errorf("Go no longer verifies the leaf issued before the add: %v", err)
	}
	// A host connects to the bus as before and is answered.
	key := joinWithKey(t, c, "gamma")
	gamma, err := busConn(t, c, key, spec.NodeInbox("gamma"), nil)
	if err != nil {
		t.Fatalf("a host does not connect to the bus after the add: %v", err)
	}
	if _, err := askCSR(t, gamma, "gamma", csrBody(t, ecKey(t), "gamma.internal")); err != nil {
		t.Errorf("a host connected after the add is not answered: %v", err)
	}
}

// TestCADomainRefusals: a domain that is not a DNS name, .internal itself
// or a name under it, and a duplicate are each refused naming the rule,
// audited, and change nothing: the list and the intermediate are as they
// were.
func TestCADomainRefusals(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	op := operatorConn(t, c)
	if _, err := c.certs.addCADomain(context.Background(), spec.CADomainAddRequest{Domain: "example.org"}); err != nil {
		t.Fatal(err)
	}
	list, file := domainList(t, c), intermediateFile(t, c)
	for _, tc := range []struct {
		domain, kind, want string
	}{
		{"internal", spec.ReplyCaller, "the mesh's own names"},
		{".internal", spec.ReplyCaller, "the mesh's own names"},
		{"web.alpha.internal", spec.ReplyCaller, "the mesh's own names"},
		{"not a domain", spec.ReplyCaller, "not a domain name"},
		{"exa mple.net", spec.ReplyCaller, "use only a-z"},
		{"org", spec.ReplyCaller, "not a domain name"},
		{".example.net", spec.ReplyCaller, "leading dot"},
		{"Example.net", spec.ReplyCaller, "use only a-z"},
		{"example.org", spec.ReplyRefused, "example.org is already declared"},
	} {
		rows := auditRows(t, db)
		err := callAPI(t, op, spec.CADomainAdd.Name, spec.CADomainAddRequest{Domain: tc.domain}, nil)
		var re *spec.ReplyError
		if !errors.As(err, &re) || re.Kind != tc.kind || !strings.Contains(re.Message, tc.want) {
			t.Errorf("add %q: %v, want a %s error saying %q", tc.domain, err, tc.kind, tc.want)
		}
		if got := domainList(t, c); !sameDomains(got, list) {
			t.Errorf("add %q changed the list: %+v, was %+v", tc.domain, got, list)
		}
		if !bytes.Equal(intermediateFile(t, c), file) {
			t.Errorf("add %q changed intermediate.crt", tc.domain)
		}
		if auditRows(t, db) != rows+1 {
			t.Errorf("add %q was not audited", tc.domain)
		} else if e := lastAudit(t, db); e.Verb != spec.CADomainAdd.Name || !strings.Contains(e.Outcome, tc.want) {
			t.Errorf("add %q audited as %+v", tc.domain, e)
		}
	}
}

func sameDomains(a, b spec.CADomainListResult) bool {
	return slices.EqualFunc(a.Domains, b.Domains, func(x, y spec.CADomain) bool { return x.Name == y.Name && x.Signed == y.Signed }) &&
		slices.Equal(a.Permitted, b.Permitted) && a.Intermediate == b.Intermediate
}

// domainRecordFailing is the real store refusing to record a CA domain.
type domainRecordFailing struct {
	*store.DB
	fail atomic.Bool
}

func (s *domainRecordFailing) SetIntermediate(ctx context.Context, in store.Intermediate, domain string) error {
	if s.fail.Load() {
		return errors.New("record CA domain: disk I/O error")
	}
	return s.DB.SetIntermediate(ctx, in, domain)
}

// TestCADomainAddHalfWay: an add that fails before the domain is recorded
// changes nothing and leaves no prepared intermediate behind; one that
// fails after (the new intermediate not put in place) leaves the domain
// recorded and not signed, which the list says, and the same add again
// finishes it.
func TestCADomainAddHalfWay(t *testing.T) {
	t.Parallel()
	var fs *domainRecordFailing
	c, _ := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store {
		fs = &domainRecordFailing{DB: db}
		return fs
	})
	ctx := context.Background()
	list, file := domainList(t, c), intermediateFile(t, c)

	fs.fail.Store(true)
	if _, err := c.certs.addCADomain(ctx, spec.CADomainAddRequest{Domain: "example.org"}); err == nil || spec.KindOf(err) != spec.ReplyFailed {
		t.Fatalf("add while the store refuses the record: %v, want the controller's failure", err)
	}
	fs.fail.Store(false)
	if got := domainList(t, c); !sameDomains(got, list) || !bytes.Equal(intermediateFile(t, c), file) {
		t.Errorf("a failed record changed the CA: %+v", got)
	}
	if left, _ := filepath.Glob(filepath.Join(c.deps.CA.Dir(), "intermediates", "*")); len(left) != 0 {
		t.Errorf("a failed add left %v", left)
	}

	// The new intermediate cannot be put in place: its temporary file's
	// name is taken by a directory.
	blocker := filepath.Join(c.deps.CA.Dir(), "intermediate.crt.tmp")
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := c.certs.addCADomain(ctx, spec.CADomainAddRequest{Domain: "example.org"})
	if err == nil || !strings.Contains(err.Error(), "mesh ca domain add example.org again finishes it") {
		t.Fatalf("add whose intermediate cannot be put in place: %v, want a failure saying how to finish", err)
	}
	half := domainList(t, c)
	if len(half.Domains) != 1 || half.Domains[0].Signed || !bytes.Equal(intermediateFile(t, c), file) || slices.Contains(c.deps.CA.Permitted(), "example.org") {
		t.Fatalf("after the add failed half-way: %+v, intermediate changed %v; want example.org recorded, not signed", half, !bytes.Equal(intermediateFile(t, c), file))
	}
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	res, err := c.certs.addCADomain(ctx, spec.CADomainAddRequest{Domain: "example.org"})
	if err != nil {
		t.Fatalf("the same add again: %v", err)
	}
	if len(res.Domains) != 1 || !res.Domains[0].Signed || !slices.Contains(c.deps.CA.Permitted(), "example.org") {
		t.Errorf("the same add again: %+v, permitted %v; want example.org signed", res, c.deps.CA.Permitted())
	}
	if _, err := c.certs.addCADomain(ctx, spec.CADomainAddRequest{Domain: "example.org"}); spec.KindOf(err) != spec.ReplyRefused {
		t.Errorf("a third add: %v, want refused as a duplicate", err)
	}
}

// TestCADomainAddIsTakenByTheNextLeader: the intermediate a domain's add
// issues is kept in the store, its key sealed, and a controller whose CA
// directory was copied before the add (another controller's, handed at
// its join) signs with it once it starts: under the same constraints.
// Opened with another at-rest key it is refused, naming the key's file,
// and the CA is left as it was.
func TestCADomainAddIsTakenByTheNextLeader(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	copyDir := filepath.Join(t.TempDir(), "ca")
	if out, err := exec.Command("cp", "-a", c.deps.CA.Dir(), copyDir).CombinedOutput(); err != nil {
		t.Fatalf("copy the CA: %v: %s", err, out)
	}
	if _, err := c.certs.addCADomain(ctx, spec.CADomainAddRequest{Domain: "example.org"}); err != nil {
		t.Fatal(err)
	}
	in, err := db.Intermediate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Serial != ca.SerialOf(c.deps.CA.Intermediate()) || strings.Contains(in.KeySealed, "PRIVATE KEY") {
		t.Fatalf("the store keeps intermediate %s (key %.40q); want %s, its key sealed", in.Serial, in.KeySealed, ca.SerialOf(c.deps.CA.Intermediate()))
	}
	other, err := ca.Load(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	was := other.Intermediate()
	wrong, err := seal.CreateRestKey(filepath.Join(t.TempDir(), "rest.key"))
	if err != nil {
		t.Fatal(err)
	}
	next := &certs{base: c.certs.base, ca: other, key: wrong}
	if err := next.adopt(ctx); err == nil || !strings.Contains(err.Error(), SealKeyFile) {
		t.Fatalf("adopt under another at-rest key: %v, want it refused naming %s", err, SealKeyFile)
	}
	if !other.Intermediate().Equal(was) {
		t.Fatal("a refused adopt changed the intermediate")
	}
	next.key = c.certs.key
	if err := next.adopt(ctx); err != nil {
		t.Fatal(err)
	}
	if !other.Intermediate().Equal(c.deps.CA.Intermediate()) || !slices.Contains(other.Permitted(), "example.org") {
		t.Fatalf("the next leader signs under %s permitting %q; want %s with example.org", ca.SerialOf(other.Intermediate()), other.Permitted(), in.Serial)
	}
}

// TestCACerts: every leaf issued is listed, in the order of issue, with
// its node, names, expiry and serial; After pages.
func TestCACerts(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	nc := certMesh(t, c, db)
	for _, names := range [][]string{{"beta.internal"}, {"web.beta.internal", "beta.internal"}} {
		if _, err := askCSR(t, nc, "beta", csrBody(t, ecKey(t), names...)); err != nil {
			t.Fatal(err)
		}
	}
	var res spec.CACertsResult
	if err := callAPI(t, operatorConn(t, c), spec.CACerts.Name, spec.CACertsRequest{}, &res); err != nil {
		t.Fatal(err)
	}
	stored, _ := db.Certs(context.Background(), 0, 10)
	if len(res.Certs) != 2 || res.Next != 0 {
		t.Fatalf("ca.certs = %+v, want both leaves and no next page", res)
	}
	for i, got := range res.Certs {
		s := stored[i]
		if got.Serial != s.Serial || got.Node != "beta" || !slices.Equal(got.Names, s.Names) || !got.NotAfter.Equal(s.NotAfter) {
			t.Errorf("ca.certs[%d] = %+v, want %+v", i, got, s)
		}
	}
	page, err := c.certs.listCerts(context.Background(), spec.CACertsRequest{After: stored[0].ID})
	if err != nil || len(page.Certs) != 1 || page.Certs[0].Serial != stored[1].Serial {
		t.Errorf("ca.certs after the first: %+v, %v", page, err)
	}
}

// TestStatusCertNotRenewed: a node's latest leaf for a name it holds that
// expires within a week takes the all-clear away, named in its failures
// and the problems; a renewal (a newer leaf for the name) gives it back;
// a leaf for a name the node no longer holds is not its concern.
func TestStatusCertNotRenewed(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	heard := func() {
		t.Helper()
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", HostVersion: "v1", Protocol: spec.Protocol}, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	sign := func() string {
		t.Helper()
		_, _, serial, err := c.signCSR(ctx, "alpha", csrBody(t, ecKey(t), "alpha.internal"))
		if err != nil {
			t.Fatal(err)
		}
		return serial
	}
	heard()
	first := sign()
	// A leaf for a route alpha served once and serves no more.
	if err := db.RecordCert(ctx, store.Cert{Serial: "0ld", Node: "alpha", Names: []string{"gone.alpha.internal"},
		NotAfter: clk.Now().Add(time.Hour), Issued: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if res := statusOf(t, c); !res.AllClear {
		t.Fatalf("a fresh leaf (and one for a name no longer held): not all clear: %q", res.Problems)
	}

	clk.Add(DefaultCertLifetime - 6*24*time.Hour)
	heard()
	res := statusOf(t, c)
	st := nodeStatus(res, "alpha")
	if res.AllClear {
		t.Fatal("a leaf expiring in 6 days, not renewed: all clear")
	}
	if len(st.Failures) != 1 || !strings.Contains(st.Failures[0], "certificate "+first) || !strings.Contains(st.Failures[0], "expires in 144h0m0s") {
		t.Errorf("alpha's failures %q, want the leaf %s expiring in 6 days", st.Failures, first)
	}
	if !strings.Contains(strings.Join(res.Problems, "\n"), "alpha has 1 certificate(s) expiring within a week") {
		t.Errorf("problems %q do not count alpha's certificate", res.Problems)
	}

	sign() // renewed
	if res := statusOf(t, c); !res.AllClear {
		t.Errorf("after the renewal: not all clear: %q", res.Problems)
	}

	clk.Add(DefaultCertLifetime + time.Hour)
	heard()
	if st := nodeStatus(statusOf(t, c), "alpha"); len(st.Failures) != 1 || !strings.Contains(st.Failures[0], "expired 1h0m0s ago") {
		t.Errorf("an expired leaf not renewed: failures %q", st.Failures)
	}
}

// TestGenesisIntermediateIsConstrained: a new mesh's intermediate permits
// the mesh's own names and the bus's, and nothing else: the bus's
// certificate (mesh-bus and its addresses) is issued and a host verifies
// it; a leaf for any other name is not signed.
func TestGenesisIntermediateIsConstrained(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	if got := c.deps.CA.Permitted(); !slices.Equal(got, []string{"internal", spec.BusTLSName}) {
		t.Fatalf("genesis's intermediate permits %v, want internal and %s", got, spec.BusTLSName)
	}
	// newController issued the bus's certificate from it; a host connects.
	if _, err := busConn(t, c, joinWithKey(t, c, "beta"), spec.NodeInbox("beta"), nil); err != nil {
		t.Errorf("a host does not verify the bus under the constrained intermediate: %v", err)
	}
	var outside *ca.ConstraintError
	if _, err := c.deps.CA.IssueServer([]string{"localhost"}, nil, time.Hour); !errors.As(err, &outside) {
		t.Errorf("a leaf for localhost: %v, want a name outside the constraints", err)
	}
}
