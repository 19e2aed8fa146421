package spec

import (
	"fmt"
	"strings"
	"time"
)

// KindCertificate is a certificate the host obtains from the mesh's CA for
// one DNS name (through certmagic, the key made on the host) and keeps in a
// directory: cert.pem (the leaf, then its intermediate), key.pem (0600) and
// ca.pem (the mesh's root), swapped in as a pair when it is renewed.
const KindCertificate = "certificate"

func init() {
	Register(Kind{Name: KindCertificate, Path: true,
		New: func() Spec { return &CertificateSpec{} },
		Manifest: func(raw []byte) (Declared, error) {
			m := &certificateManifest{}
			return m, Decode(raw, m)
		}})
}

// The files a certificate's directory holds, each a link to the same name
// in the version directory CertDataLink names.
const (
	CertFile    = "cert.pem"
	CertKeyFile = "key.pem"
	CertCAFile  = "ca.pem"
	// CertDataLink is the link in a certificate's directory to the version
	// directory that holds the pair now ("..<serial>"): swapping it is how
	// a renewal reaches readers, all three files at once.
	CertDataLink = "..data"
)

// HeldCert is a certificate a node serves in a certificate resource's
// directory: its name, the directory, its serial (lower-case hex) and when
// it expires.
type HeldCert struct {
	Name     string    `json:"name"`
	Path     string    `json:"path"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
}

// CertificateSpec is the certificate for Name kept in the directory Path.
// Its target is the path: a certificate and a file or directory may not
// both be declared at one path.
type CertificateSpec struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// Kind is KindCertificate.
func (*CertificateSpec) Kind() string { return KindCertificate }

// Target is the directory's path.
func (c *CertificateSpec) Target() string { return c.Path }

// Check refuses a certificate whose path is not absolute and clean or whose
// name is not one DNS name, as settings fill it (a module's spec holds
// ${node}; a node's is filled).
func (c *CertificateSpec) Check() error {
	if err := CheckCertName(probe(c.Name)); err != nil {
		return err
	}
	return CheckPath(c.Path)
}

// CheckCertName refuses a certificate's name that is not one DNS name of
// two labels or more, each a DNS label (lowercase a-z, 0-9 and '-'): the
// mesh signs DNS names only, one per certificate, no wildcard.
func CheckCertName(name string) error {
	if name == "" {
		return fmt.Errorf("certificate name is empty: give one DNS name, such as web.${node}.internal")
	}
	if strings.Contains(name, "*") {
		return fmt.Errorf("certificate name %q is a wildcard: the mesh signs the names a node serves, one per certificate", name)
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 || len(name) > 253 {
		return fmt.Errorf("certificate name %q is not a DNS name such as web.alpha.internal", name)
	}
	for _, l := range labels {
		if err := CheckName("certificate name's label", l); err != nil {
			return fmt.Errorf("certificate name %q: %w", name, err)
		}
	}
	return nil
}

// Fill fills the name and the path.
func (c *CertificateSpec) Fill(fill func(field, s string) (string, error)) (Spec, error) {
	out := *c
	var err error
	if out.Name, err = fill("name", c.Name); err != nil {
		return nil, err
	}
	if out.Path, err = fill("path", c.Path); err != nil {
		return nil, err
	}
	return &out, nil
}

// Blobs is none: the host obtains the certificate itself.
func (*CertificateSpec) Blobs() []Blob { return nil }

// Row lists the directory and the name its certificate is for.
func (c *CertificateSpec) Row() Row {
	return Row{Target: c.Path, Mode: "-", Owner: "-", Content: "certificate for " + c.Name + ": " + CertFile + ", " + CertKeyFile + ", " + CertCAFile}
}

// certificateManifest is a certificate in module.json: its name and path.
type certificateManifest struct{ CertificateSpec }

// Spec is the certificate as declared.
func (m *certificateManifest) Spec() Spec { c := m.CertificateSpec; return &c }

// Check refuses a name or path that is not well formed, as settings will
// fill them.
func (m *certificateManifest) Check(field string) error {
	if err := CheckCertName(probe(m.Name)); err != nil {
		return fmt.Errorf("%s.name: %w", field, err)
	}
	if err := CheckPath(m.Path); err != nil {
		return fmt.Errorf("%s.path: %w", field, err)
	}
	return nil
}

// Resolve is the certificate: it has no sources.
func (m *certificateManifest) Resolve(string, func(string) (Content, error)) (Spec, error) {
	c := m.CertificateSpec
	return &c, nil
}
