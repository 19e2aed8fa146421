package spec

import "fmt"

// KindTrust is the mesh's root in the machine's trust store: the host
// installs the root it pinned at join as an anchor and refreshes the store.
// The controller sends no certificate bytes.
const KindTrust = "trust"

func init() {
	Register(Kind{Name: KindTrust,
		New: func() Spec { return &TrustSpec{} },
		Manifest: func(raw []byte) (Declared, error) {
			m := &trustManifest{}
			return m, Decode(raw, m)
		}})
}

// TrustSpec is the mesh's root installed as the trust anchor named Name: the
// file mesh-NAME.crt in the distribution's anchor directory.
type TrustSpec struct {
	Name string `json:"name"`
}

// TrustAnchorFile is the file name the anchor named name is installed as.
func TrustAnchorFile(name string) string { return "mesh-" + name + ".crt" }

// Kind is KindTrust.
func (*TrustSpec) Kind() string { return KindTrust }

// Target is the anchor's name.
func (t *TrustSpec) Target() string { return t.Name }

// Check refuses an anchor name that is not a DNS label (it becomes a file
// name).
func (t *TrustSpec) Check() error { return CheckName("trust", probe(t.Name)) }

// Fill fills the name.
func (t *TrustSpec) Fill(fill func(field, s string) (string, error)) (Spec, error) {
	c := *t
	var err error
	if c.Name, err = fill("name", t.Name); err != nil {
		return nil, err
	}
	return &c, nil
}

// Blobs is none: the host holds the root.
func (*TrustSpec) Blobs() []Blob { return nil }

// Row lists the anchor by the file it becomes.
func (t *TrustSpec) Row() Row {
	return Row{Target: t.Name, Mode: "-", Owner: "-", Content: "the mesh root, as " + TrustAnchorFile(t.Name) + " in the trust store"}
}

// trustManifest is a trust anchor in module.json: its name, nothing else.
type trustManifest struct{ TrustSpec }

// Spec is the anchor as declared.
func (m *trustManifest) Spec() Spec { t := m.TrustSpec; return &t }

// Check refuses a name that is not a DNS label, unless settings fill it.
func (m *trustManifest) Check(field string) error {
	if err := CheckName("trust", probe(m.Name)); err != nil {
		return fmt.Errorf("%s.name: %w", field, err)
	}
	return nil
}

// Resolve is the anchor: it has no sources.
func (m *trustManifest) Resolve(string, func(string) (Content, error)) (Spec, error) {
	t := m.TrustSpec
	return &t, nil
}
