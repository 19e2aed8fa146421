package mesh

import (
	"fmt"
	"sort"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
)

// grantSettings are the settings a's module is given on node: those
// assigned, and those its grants fill (the consumer's name, its
// credential, the provider's address). A grant it consumes but holds no
// credential for, one no registered module provides any more, or a
// filled setting also given, is the node's own failure: the push names
// the node and sends it nothing, so it keeps the declaration it last
// received, its credentials with it (invariant 1).
func grantSettings(node string, m spec.Module, a Assigned) (map[string]string, error) {
	if len(m.Consumes) == 0 {
		return a.Settings, nil
	}
	given := make(map[string]string, len(a.Settings)+3*len(m.Consumes))
	for k, v := range a.Settings {
		given[k] = v
	}
	for _, c := range m.Consumes {
		g, ok := a.Grants[c.Grant]
		if !ok {
			return nil, &ComposeError{Node: node, Reason: fmt.Sprintf("module %q consumes grant %q but holds no credential for it: assign it again (mesh assign %s %s)",
				m.Name, c.Grant, m.Name, node)}
		}
		if g.Address == "" {
			return nil, &ComposeError{Node: node, Reason: fmt.Sprintf("module %q consumes grant %q, which no registered module provides any more", m.Name, c.Grant)}
		}
		for role, name := range c.Filled() {
			if _, dup := given[name]; dup {
				return nil, &ComposeError{Node: node, Reason: fmt.Sprintf("module %q: setting %q is filled by grant %q and is given too: assign it again without it",
					m.Name, name, c.Grant)}
			}
			switch role {
			case "user":
				given[name] = spec.GrantConsumerName(m.Name, node)
			case "password":
				given[name] = g.Credential
			case "address":
				given[name] = g.Address
			}
		}
	}
	return given, nil
}

// providedFile is the file a provider's node keeps its consumers'
// credentials in: one line a consumer, in name order, sealed to the node
// (Secret).
func providedFile(p Provided, modules map[string]spec.Module) (spec.Resource, error) {
	m, ok := modules[p.Module]
	if !ok {
		return spec.Resource{}, fmt.Errorf("module %q is assigned but not registered", p.Module)
	}
	pr, ok := m.Provider(p.Grant)
	if !ok {
		return spec.Resource{}, fmt.Errorf("module %q does not provide grant %q", p.Module, p.Grant)
	}
	names := make([]string, 0, len(p.Consumers))
	for name := range p.Consumers {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		line, err := spec.Fill(pr.File.Line, map[string]string{spec.GrantConsumer: name, spec.GrantCredential: p.Consumers[name]})
		if err != nil {
			return spec.Resource{}, fmt.Errorf("module %q, grant %q: line: %w", p.Module, p.Grant, err)
		}
		b.WriteString(line + "\n")
	}
	content := []byte(b.String())
	return spec.Resource{Name: spec.ResourceName(p.Module, spec.KindFile, pr.File.Path), Kind: spec.KindFile, Module: p.Module,
		Spec: &spec.FileSpec{Path: pr.File.Path, Mode: pr.File.FileMode(), Content: content, Secret: true,
			Size: int64(len(content)), Digest: spec.ContentDigest(content), OnChange: pr.File.OnChange}}, nil
}
