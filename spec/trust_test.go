package spec

import "testing"

// A trust anchor named by a setting registers: the controller checks the
// module as it is (the name still holds ${anchor}) and as settings fill it;
// a name that is not a DNS label is refused either way.
func TestTrustNamedBySettingChecks(t *testing.T) {
	t.Parallel()
	mesh := "mesh"
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"${anchor}", true},
		{"mesh-${anchor}", true},
		{"mesh", true},
		{"Not A Label", false},
		{"${anchor}/x", false},
	} {
		r := Resource{Name: ResourceName("ca", KindTrust, tc.name), Kind: KindTrust, Module: "ca", Spec: &TrustSpec{Name: tc.name}}
		m := Module{Name: "ca", Version: "1", Settings: []Setting{{Name: "anchor", Type: "string", Default: &mesh}}, Resources: []Resource{r}}
		if err := m.Check(); (err == nil) != tc.ok {
			t.Errorf("trust %q: Check() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
