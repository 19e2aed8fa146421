package mesh

import (
	"errors"
	"fmt"
	"sort"

	"github.com/mesh-fleet/mesh/spec"
)

// ErrNodeOwn marks a composition failure that is the node's own: its set of
// modules does not compose. Gatherers that walk every node pass over these
// and only these; every other failure is raised (invariant 1).
var ErrNodeOwn = errors.New("the node's own modules do not compose")

// ComposeError is a node's own composition failure, naming the node and why.
type ComposeError struct {
	Node   string
	Reason string
}

func (e *ComposeError) Error() string {
	return fmt.Sprintf("node %q does not compose: %s", e.Node, e.Reason)
}

// Is makes a ComposeError match ErrNodeOwn.
func (e *ComposeError) Is(target error) bool { return target == ErrNodeOwn }

// Compose is the resources node holds: those of every module assigned to
// it, sorted by name. It reads nothing; the caller gathers modules and
// assignments. Two modules declaring the same path is the node's own
// failure.
func Compose(node string, modules map[string]spec.Module, assigned []string) ([]spec.Resource, error) {
	resources := []spec.Resource{}
	owner := map[string]string{}
	for _, name := range assigned {
		m, ok := modules[name]
		if !ok {
			return nil, fmt.Errorf("compose node %q: module %q is assigned but not registered", node, name)
		}
		for _, r := range m.Resources {
			if prev, taken := owner[r.Target()]; taken {
				return nil, &ComposeError{Node: node, Reason: fmt.Sprintf("modules %q and %q both declare %s", prev, m.Name, r.Target())}
			}
			owner[r.Target()] = m.Name
			resources = append(resources, r)
		}
	}
	sort.Slice(resources, func(i, j int) bool { return resources[i].Name < resources[j].Name })
	return resources, nil
}
