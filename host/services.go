package host

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/mesh-fleet/mesh/seal"
)

// Services are what the host offers the kinds it holds: made once (by the
// agent as it starts, by a test with what it exercises) and handed to
// NewEngine, whose appliers each take what their kind needs of them (see
// hostKind.applier). A service left zero is one the host does not have: a
// kind that needs it fails saying so. A kind that needs a new service adds
// a field here; one whose service runs beside the agent fills it from its
// kindRun (provide).
type Services struct {
	// Root is where declared paths resolve: "/" in production.
	Root string
	// Blobs is where contents are fetched from, by digest.
	Blobs BlobFetcher
	// Docker is the container engine; nil: containers and the node's
	// network fail saying the host has none.
	Docker *Docker
	// Node is the node the host is.
	Node string
	// Address is the node's address, where containers publish ports
	// while the overlay is off.
	Address string
	// Overlay is the node's overlay address while the held roster has the
	// overlay on and this node on it, where containers publish ports
	// then; nil or "": they publish on Address.
	Overlay func() string
	// Subnet is the node's container network; its gateway is where the
	// machine's resolver serves the containers.
	Subnet netip.Prefix
	// Names is the machine's resolver, which serves the containers while
	// the network is there; nil: names are not served to containers.
	Names Names
	// CARoot is the mesh's root (PEM) the host pinned at join, which the
	// trust kind installs.
	CARoot string
	// Versions is D/host/versions (see spec/launch.go), where binaries
	// are delivered; "": binary resources fail, saying the host keeps
	// none.
	Versions string
	// SealKey opens the contents the controller sealed to this node; nil:
	// a sealed file fails, saying the host keeps no sealing key.
	SealKey *seal.NodeKey
	// Runtime is D/host/run (RuntimeDir), where containers' secrets lie
	// on tmpfs mounts; "": a container with secrets fails, saying the
	// host keeps none.
	Runtime string
	// certs obtains and renews certificates; nil: certificate resources
	// fail, saying the host has no certificate manager.
	certs *certs
	// edge is the host's edge, which edge resources configure; nil: they
	// fail, saying the host runs none.
	edge *edge
	// goos and goarch are the system this host runs (runtime's unless a
	// test pretends): a binary built for another fails.
	goos, goarch string
	// verified remembers the delivered binaries already hashed.
	verified *verifiedBinaries
}

// DefaultSubnet is the node's container network (Services.Subnet) when
// mesh host --subnet does not name one.
var DefaultSubnet = netip.MustParsePrefix("10.213.0.0/24")

// containerSubnet is the node's container network as p names it:
// DefaultSubnet when p is zero. One that is not IPv4, or smaller than a
// /29, is refused.
func containerSubnet(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		p = DefaultSubnet
	}
	if !p.Addr().Is4() || p.Bits() > 29 {
		return netip.Prefix{}, fmt.Errorf("container subnet %s: give an IPv4 network of /29 or larger", p)
	}
	return p, nil
}

// withDefaults is s with what the host always has filled in: the system
// it runs and the memory of binaries verified.
func (s Services) withDefaults() Services {
	if s.goos == "" {
		s.goos, s.goarch = thisSystem()
	}
	if s.verified == nil {
		s.verified = &verifiedBinaries{}
	}
	return s
}

// spool is where a large blob is fetched to before it is handed on: the
// host's own directory (beside versions) when it keeps one, so an image
// archive does not fill a /tmp held in memory; else the system's
// temporary directory.
func (s *Services) spool() string {
	if s.Versions == "" {
		return ""
	}
	return filepath.Dir(s.Versions)
}
