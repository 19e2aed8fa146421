package spec

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// KindEdge is an edge: the host serves, in its own process, every public
// name of every route in the roster it holds over HTTPS, with certificates
// it obtains from an ACME CA, and forwards each request to the node that
// serves the route.
const KindEdge = "edge"

// EdgeBucket is the JetStream key-value bucket the edges share their ACME
// account, certificates, challenges and locks in: the controller makes it,
// and only the nodes assigned an edge may use it (EdgePermissions).
const EdgeBucket = "mesh-edge"

// EdgeStorageKeySize is the length of the edge storage key, in bytes: the
// mesh's one key every value in EdgeBucket is sealed under, which only
// edges hold.
const EdgeStorageKeySize = 32

// EdgePermissions is what a node assigned an edge may do on the bus beside
// its own subjects (NodePermissions): use EdgeBucket through nats.go's
// key-value client (its stream's info, direct and message gets, the
// ordered consumers that list and watch it and their flow control, and
// the bucket's subjects). Replies come to the node's inbox, which it may
// receive already.
func EdgePermissions() Permissions {
	const stream = "KV_" + EdgeBucket
	return Permissions{Publish: []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.CONSUMER.CREATE." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DELETE." + stream + ".*",
		"$JS.FC." + stream + ".>",
		"$KV." + EdgeBucket + ".>",
	}}
}

// The edge's defaults, which a manifest that leaves a field out gets.
const (
	EdgeHTTP   = ":80"
	EdgeHTTPS  = ":443"
	EdgeACMECA = "https://acme-v02.api.letsencrypt.org/directory"
)

func init() {
	Register(Kind{Name: KindEdge,
		New: func() Spec { return &EdgeSpec{} },
		Manifest: func(raw []byte) (Declared, error) {
			m := &edgeManifest{}
			if err := Decode(raw, m); err != nil {
				return m, err
			}
			m.defaults()
			return m, nil
		}})
}

// EdgeSpec is the edge named Name: its HTTP listener (ACME's HTTP-01
// challenges, and redirects to HTTPS), its HTTPS listener, the ACME
// directory its certificates come from, the account's email, and
// optionally the path on the machine of a PEM file of roots that the ACME
// server's own TLS is verified against (a private ACME CA).
type EdgeSpec struct {
	Name      string `json:"name"`
	HTTP      string `json:"http"`
	HTTPS     string `json:"https"`
	ACMECA    string `json:"acme_ca"`
	Email     string `json:"email,omitempty"`
	ACMERoots string `json:"acme_roots,omitempty"`
	// StorageKey is the mesh's edge storage key sealed to the node's
	// sealing key, and StorageDigest its keyed digest
	// (SealedDigestPrefix), both filled in by the controller: with it,
	// the edge keeps its certificates in EdgeBucket, shared with every
	// other edge; without, on its own disk.
	StorageKey    string `json:"storage_key,omitempty"`
	StorageDigest string `json:"storage_digest,omitempty"`
}

// Kind is KindEdge.
func (*EdgeSpec) Kind() string { return KindEdge }

// Target is the edge's name.
func (e *EdgeSpec) Target() string { return e.Name }

// Check refuses an edge whose name is not a DNS label, or that lacks a
// listen address or an ACME directory. Settings may fill every field
// wholly (and a module's check fills each with a stand-in), so what the
// values say is checked by CheckValues, once they are filled.
func (e *EdgeSpec) Check() error {
	if err := CheckName("edge", probe(e.Name)); err != nil {
		return err
	}
	switch {
	case e.HTTP == "":
		return fmt.Errorf("edge %q: no http listen address (%s by default)", e.Name, EdgeHTTP)
	case e.HTTPS == "":
		return fmt.Errorf("edge %q: no https listen address (%s by default)", e.Name, EdgeHTTPS)
	case e.ACMECA == "":
		return fmt.Errorf("edge %q: no acme_ca (%s by default)", e.Name, EdgeACMECA)
	case (e.StorageKey == "") != (e.StorageDigest == ""):
		return fmt.Errorf("edge %q: a sealed storage key comes with its digest, and a digest with its sealed key", e.Name)
	case e.StorageDigest != "" && (!strings.HasPrefix(e.StorageDigest, SealedDigestPrefix) || len(e.StorageDigest) != len(SealedDigestPrefix)+64):
		return fmt.Errorf("edge %q: storage_digest is not %sHEX", e.Name, SealedDigestPrefix)
	}
	return nil
}

// CheckValues refuses, once settings filled them, listen addresses that
// are not host:port or are one address for both, an ACME directory that
// is not an https URL, an email
// with no '@' and roots that are not an absolute clean path: what the
// host checks before it serves an edge.
func (e *EdgeSpec) CheckValues() error {
	if err := e.Check(); err != nil {
		return err
	}
	for _, l := range []struct{ field, addr string }{{"http", e.HTTP}, {"https", e.HTTPS}} {
		if err := checkListen(l.addr); err != nil {
			return fmt.Errorf("edge %q %s: %w", e.Name, l.field, err)
		}
	}
	if e.HTTP == e.HTTPS {
		return fmt.Errorf("edge %q: http and https both listen on %q", e.Name, e.HTTP)
	}
	if err := checkACMEDirectory(e.ACMECA); err != nil {
		return fmt.Errorf("edge %q acme_ca: %w", e.Name, err)
	}
	if e.Email != "" && (!strings.Contains(e.Email, "@") || strings.ContainsAny(e.Email, " \t\r\n")) {
		return fmt.Errorf("edge %q email: %q is not an email address", e.Name, e.Email)
	}
	if e.ACMERoots != "" {
		if err := CheckPath(e.ACMERoots); err != nil {
			return fmt.Errorf("edge %q acme_roots: %w", e.Name, err)
		}
	}
	return nil
}

// checkListen refuses what is not a listen address host:port with a port
// from 1 to 65535 (the host may be empty: every address).
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not a listen address such as :443: %w", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not from 1 to 65535", addr, port)
	}
	return nil
}

// checkACMEDirectory refuses what is not an https URL with a host.
func checkACMEDirectory(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", s, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an https URL of an ACME directory, such as %s", s, EdgeACMECA)
	}
	return nil
}

// Fill fills every field.
func (e *EdgeSpec) Fill(fill func(field, s string) (string, error)) (Spec, error) {
	out := *e
	for _, f := range []struct {
		name string
		s    *string
	}{{"name", &out.Name}, {"http", &out.HTTP}, {"https", &out.HTTPS}, {"acme_ca", &out.ACMECA}, {"email", &out.Email}, {"acme_roots", &out.ACMERoots}} {
		v, err := fill(f.name, *f.s)
		if err != nil {
			return nil, err
		}
		*f.s = v
	}
	return &out, nil
}

// Blobs is none: the edge's certificates come from the ACME CA.
func (*EdgeSpec) Blobs() []Blob { return nil }

// Row lists the edge by its listeners and CA.
func (e *EdgeSpec) Row() Row {
	return Row{Target: e.Name, Mode: "-", Owner: "-", Content: fmt.Sprintf("edge on %s and %s, certificates from %s", e.HTTP, e.HTTPS, e.ACMECA)}
}

// edgeManifest is an edge in module.json: a field left out is its
// default (EdgeHTTP, EdgeHTTPS, EdgeACMECA).
type edgeManifest struct {
	EdgeSpec
	StorageKey    edgeFilled `json:"storage_key"`
	StorageDigest edgeFilled `json:"storage_digest"`
}

// edgeFilled is a field of an edge that module.json does not give.
type edgeFilled struct{}

// UnmarshalJSON refuses the field.
func (*edgeFilled) UnmarshalJSON([]byte) error {
	return errors.New("an edge's storage_key and storage_digest are not written in module.json: the controller fills them")
}

func (m *edgeManifest) defaults() {
	if m.HTTP == "" {
		m.HTTP = EdgeHTTP
	}
	if m.HTTPS == "" {
		m.HTTPS = EdgeHTTPS
	}
	if m.ACMECA == "" {
		m.ACMECA = EdgeACMECA
	}
}

// Spec is the edge as declared.
func (m *edgeManifest) Spec() Spec { e := m.EdgeSpec; return &e }

// Check refuses what is not well formed, as settings will fill it.
func (m *edgeManifest) Check(field string) error {
	if err := m.EdgeSpec.Check(); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// Resolve is the edge: it has no sources.
func (m *edgeManifest) Resolve(string, func(string) (Content, error)) (Spec, error) {
	e := m.EdgeSpec
	return &e, nil
}
