package spec

import (
	"fmt"
	"strings"
)

// KindNetwork is the node's own container network. Compose declares it
// beside the node's first container; module.json does not.
const KindNetwork = "network"

func init() {
	Register(Kind{Name: KindNetwork, Needs: &ContainerEngine,
		New: func() Spec { return &NetworkSpec{} }})
}

// NetworkModule is the module name the node's own network is declared
// under: it belongs to the node, not to any module.
const NetworkModule = "mesh"

// NetworkName is the name of node's own container network, a bridge on its
// machine whose gateway is where its resolver also listens.
func NetworkName(node string) string { return "mesh-" + node }

// NodeNetwork is node's own network, as compose declares it.
func NodeNetwork(node string) Resource {
	name := NetworkName(node)
	return Resource{Name: ResourceName(NetworkModule, KindNetwork, name), Kind: KindNetwork, Module: NetworkModule,
		Spec: &NetworkSpec{Name: name}}
}

// NetworkSpec is the node's own bridge network. Its subnet is the host's
// choice (mesh host --subnet), as its address is.
type NetworkSpec struct {
	Name string `json:"name"`
}

// Kind is KindNetwork.
func (*NetworkSpec) Kind() string { return KindNetwork }

// Target is the network's name.
func (n *NetworkSpec) Target() string { return n.Name }

// Check refuses a network spec that is not well formed.
func (n *NetworkSpec) Check() error {
	if !strings.HasPrefix(n.Name, "mesh-") {
		return fmt.Errorf("network name %q is not mesh-NODE", n.Name)
	}
	return CheckName("network", strings.TrimPrefix(n.Name, "mesh-"))
}

// Fill fills nothing: the network is the node's, named for it.
func (n *NetworkSpec) Fill(func(field, s string) (string, error)) (Spec, error) {
	c := *n
	return &c, nil
}

// Blobs is none.
func (*NetworkSpec) Blobs() []Blob { return nil }

// Row lists the network by name.
func (n *NetworkSpec) Row() Row { return Row{Target: n.Name, Mode: "-", Owner: "-", Content: "-"} }
