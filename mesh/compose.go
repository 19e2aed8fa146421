package mesh

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
)

// ErrNodeOwn marks a composition failure that is the node's own: its set of
// modules does not compose, or a setting reaches nothing. Gatherers that
// walk every node pass over these and only these; every other failure is
// raised (invariant 1).
var ErrNodeOwn = errors.New("the node's own composition failure")

// ComposeError is a node whose set of modules does not compose.
type ComposeError struct {
	Node   string
	Reason string
}

func (e *ComposeError) Error() string {
	return fmt.Sprintf("node %q does not compose: %s", e.Node, e.Reason)
}

// Is makes a ComposeError match ErrNodeOwn.
func (e *ComposeError) Is(target error) bool { return target == ErrNodeOwn }

// SettingError is a setting given to a module on a node that the module
// does not declare: it reaches nothing.
type SettingError struct {
	Node, Module, Setting string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("node %q: setting %q given to module %q reaches nothing: the module declares no such setting (reassign without it)",
		e.Node, e.Setting, e.Module)
}

// Is makes a SettingError match ErrNodeOwn.
func (e *SettingError) Is(target error) bool { return target == ErrNodeOwn }

// NodeInput is everything composing one node reads.
type NodeInput struct {
	Node    string
	Address string
	// Capabilities are what the node's host last reported it can hold
	// (spec.CapContainers); nil when it has reported none.
	Capabilities []string
	Assigned     []Assigned
	// Arch and OS are what the node's facts report of its machine ("" when
	// it has reported none).
	Arch, OS string
	// Binary is the release a roll declares on the node, nil when none
	// does. It is composed only where it fits the node's Arch and OS.
	Binary *spec.Release
	// BinaryRetry counts the resumed rolls that asked the node to try
	// Binary again (spec.BinarySpec.Retry).
	BinaryRetry int
	// Provided are the grants the node's modules provide, each with its
	// consumers' credentials.
	Provided []Provided
}

// Assigned is one module assigned to the node, with its settings.
type Assigned struct {
	Module   string            `json:"module"`
	Settings map[string]string `json:"settings,omitempty"`
	// Grants are the grants the module consumes on the node, by grant.
	Grants map[string]Granted `json:"grants,omitempty"`
}

// Granted is a consumer's grant: its credential, and the address of the
// provider it was given (ROUTE.NODE.internal:PORT).
type Granted struct {
	Credential string `json:"credential"`
	Address    string `json:"address"`
}

// Provided is a grant a module assigned to the node provides, and the
// credential of each of its consumers, by consumer name.
type Provided struct {
	Module    string            `json:"module"`
	Grant     string            `json:"grant"`
	Consumers map[string]string `json:"consumers"`
}

// Plan is what a node holds and serves.
type Plan struct {
	Resources []spec.Resource    `json:"resources"`
	Routes    []spec.RosterRoute `json:"routes"`
}

// ComposeNode is the plan of one node: the resources of every module
// assigned to it with ${setting}, ${node} and ${version} filled in, and the
// routes it serves. It reads nothing. A failure that is the node's own is a
// *ComposeError or *SettingError; a module assigned but not registered is
// neither (the store contradicts itself).
func ComposeNode(in NodeInput, modules map[string]spec.Module) (Plan, error) {
	plan := Plan{Resources: []spec.Resource{}, Routes: []spec.RosterRoute{}}
	own := func(format string, args ...any) error {
		return &ComposeError{Node: in.Node, Reason: fmt.Sprintf(format, args...)}
	}
	pathOwner := map[string]string{}
	hasNetwork := false // the node's own network, declared with its first container
	routeOwner := map[string]string{}
	for _, a := range in.Assigned {
		m, ok := modules[a.Module]
		if !ok {
			return Plan{}, fmt.Errorf("compose node %q: module %q is assigned but not registered", in.Node, a.Module)
		}
		given, err := grantSettings(in.Node, m, a)
		if err != nil {
			return Plan{}, err
		}
		values, err := settingValues(in.Node, m, given)
		if err != nil {
			return Plan{}, err
		}
		values["node"], values["version"] = in.Node, m.Version
		secret := false // the resource being filled takes a secret in its content
		fill := func(field, s string) (string, error) {
			secret = secret || field == "content" && spec.UsesSecret(s, m.Settings)
			v, err := spec.Fill(s, values)
			if err != nil {
				return "", fmt.Errorf("%s: %w", field, err)
			}
			return v, nil
		}
		for _, r := range m.Resources {
			kind, _ := spec.KindNamed(r.Kind)
			need := kind.Needs
			if need != nil && !slices.Contains(in.Capabilities, need.Name) {
				return Plan{}, own("module %q declares %s %q, but the node has no %s: its host does not report the %q capability (%s)",
					m.Name, r.Kind, r.Target(), need.What, need.Name, need.Hint)
			}
			secret = false
			filled, err := fillResource(r, fill)
			if err != nil {
				return Plan{}, own("module %q, resource %s: %v", m.Name, r.Name, err)
			}
			// Its content goes to the node sealed (Sealer).
			if f, ok := filled.Spec.(*spec.FileSpec); ok && secret {
				f.Secret = true
			}
			if c, ok := filled.Spec.(*spec.ContainerSpec); ok {
				if err := secretValues(c, m, values); err != nil {
					return Plan{}, own("module %q, resource %s: %v", m.Name, r.Name, err)
				}
			}
			key := filled.Key()
			if prev, taken := pathOwner[key]; taken {
				return Plan{}, own("modules %q and %q both declare %s", prev, m.Name, key)
			}
			pathOwner[key] = m.Name
			plan.Resources = append(plan.Resources, filled)
			// The node's own network comes with the first resource that
			// needs the container engine: the containers join it.
			if need != nil && need.Name == spec.CapContainers && !hasNetwork {
				hasNetwork = true
				plan.Resources = append(plan.Resources, spec.NodeNetwork(in.Node))
			}
		}
		routes, err := composeRoutes(in, m, values, routeOwner)
		if err != nil {
			return Plan{}, err
		}
		plan.Routes = append(plan.Routes, routes...)
	}
	for _, p := range in.Provided {
		r, err := providedFile(p, modules)
		if err != nil {
			return Plan{}, fmt.Errorf("compose node %q: %w", in.Node, err)
		}
		key := r.Key()
		if prev, taken := pathOwner[key]; taken {
			return Plan{}, own("modules %q and %q both declare %s", prev, p.Module, key)
		}
		pathOwner[key] = p.Module
		plan.Resources = append(plan.Resources, r)
	}
	// A roll declares the binary; one that does not fit the machine is
	// never sent (the roll skips the node and says why).
	if in.Binary != nil && spec.BinaryFits(*in.Binary, in.Arch, in.OS, in.Capabilities) == "" {
		plan.Resources = append(plan.Resources, spec.NodeBinary(*in.Binary, in.BinaryRetry))
	}
	sort.Slice(plan.Resources, func(i, j int) bool { return plan.Resources[i].Name < plan.Resources[j].Name })
	sort.Slice(plan.Routes, func(i, j int) bool { return plan.Routes[i].Name < plan.Routes[j].Name })
	return plan, nil
}

// composeRoutes are the routes module m serves on in.Node, its public
// names filled with values; a name another module of the node serves
// (routeOwner, which it fills) is the node's own failure.
func composeRoutes(in NodeInput, m spec.Module, values map[string]string, routeOwner map[string]string) ([]spec.RosterRoute, error) {
	own := func(format string, args ...any) error {
		return &ComposeError{Node: in.Node, Reason: fmt.Sprintf(format, args...)}
	}
	var routes []spec.RosterRoute
	for _, rt := range m.Routes {
		names := []string{spec.RouteName(rt.Name, in.Node)}
		for _, p := range rt.Public {
			pub, err := spec.Fill(p, values)
			if err != nil {
				return nil, own("module %q, route %q: public name %q: %v", m.Name, rt.Name, p, err)
			}
			if err := spec.CheckDomain(pub); err != nil {
				return nil, own("module %q, route %q: public name: %v", m.Name, rt.Name, err)
			}
			names = append(names, pub)
		}
		for i, name := range names {
			if prev, taken := routeOwner[name]; taken {
				return nil, own("modules %q and %q both serve %s", prev, m.Name, name)
			}
			routeOwner[name] = m.Name
			routes = append(routes, spec.RosterRoute{Name: name, Node: in.Node, Address: in.Address,
				Port: rt.Port, Module: m.Name, Public: i > 0, TLS: rt.TLS})
		}
	}
	return routes, nil
}

// ComposeChain is the CA chain every node's declaration carries: the
// intermediate that signs now, PEM. The intermediates it replaced are left
// out: they sign nothing any more, and each leaf they signed is presented
// with its own (ca.Leaf.Chain), so it verifies until it expires.
func ComposeChain(signing *x509.Certificate) string {
	return string(ca.ChainPEM(signing))
}

// settingValues checks what an assignment gives against what the module
// declares, and returns each setting's canonical value.
func settingValues(node string, m spec.Module, given map[string]string) (map[string]string, error) {
	names := make([]string, 0, len(given))
	for name := range given {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := m.Setting(name); !ok {
			return nil, &SettingError{Node: node, Module: m.Name, Setting: name}
		}
	}
	values := map[string]string{}
	for _, s := range m.Settings {
		raw, ok := given[s.Name]
		switch {
		case ok:
		case s.Default != nil:
			raw = *s.Default
		case s.Required:
			return nil, &ComposeError{Node: node, Reason: fmt.Sprintf("module %q: required setting %q has no value (mesh assign --set %s=VALUE %s %s)", m.Name, s.Name, s.Name, m.Name, node)}
		}
		v, err := s.Parse(raw)
		if err != nil {
			if s.Secret { // the value itself is not repeated
				err = fmt.Errorf("its value is not of type %s", s.Type)
			}
			return nil, &ComposeError{Node: node, Reason: fmt.Sprintf("module %q: setting %q: %v", m.Name, s.Name, err)}
		}
		values[s.Name] = v
	}
	return values, nil
}

// secretValues fills in each of c's secrets with its setting's value, which
// the sealer seals to the node. A setting m does not declare secret is
// refused: its value would travel in the clear.
func secretValues(c *spec.ContainerSpec, m spec.Module, values map[string]string) error {
	for i := range c.Secrets {
		sm := &c.Secrets[i]
		if st, ok := m.Setting(sm.Setting); !ok || !st.Secret {
			return fmt.Errorf("secrets[%d]: setting %q is not a secret setting of the module", i, sm.Setting)
		}
		sm.Value = values[sm.Setting]
	}
	return nil
}

// fillResource fills the references in r's strings with fill, and names it
// anew and checks it.
func fillResource(r spec.Resource, fill func(field, s string) (string, error)) (spec.Resource, error) {
	if r.Spec == nil {
		return r, r.Check()
	}
	filled, err := r.Spec.Fill(fill)
	if err != nil {
		return r, err
	}
	r.Spec = filled
	r.Name = spec.ResourceName(r.Module, r.Kind, r.Target())
	if err := r.Check(); err != nil {
		return r, err
	}
	return r, nil
}
