package spec

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Domain is the mesh's own domain: NODE.internal, ROUTE.NODE.internal.
const Domain = "internal"

// Roster is every name of the mesh: each node, each route and each public
// name served inside it. It travels on its own, as a RosterDoc or a
// RosterDelta, once per change, outside the declarations; the host's
// resolver answers from it;
// nothing copies it into a container.
type Roster struct {
	Nodes  []RosterNode  `json:"nodes"`
	Routes []RosterRoute `json:"routes"`
	// Overlay is the overlay's range while it is on (spec/overlay.go): the
	// nodes' and routes' addresses are then overlay addresses.
	Overlay *RosterOverlay `json:"overlay,omitempty"`
	// Controllers are the bus URLs of the mesh's controllers while it has
	// more than one (CheckControllers): a host keeps them as the bus
	// addresses it reconnects to, so that when its controller's server
	// stops it reaches another. None: the host keeps the addresses it
	// has.
	Controllers []string `json:"controllers,omitempty"`
}

// RosterNode is NODE.internal.
type RosterNode struct {
	Name    string `json:"name"` // the node's name; its address is NAME.internal
	Address string `json:"address"`
	// Overlay is the node's overlay membership while the overlay is on.
	Overlay *OverlayMember `json:"overlay,omitempty"`
}

// Equal says whether two entries are the same.
func (n RosterNode) Equal(o RosterNode) bool {
	return n.Name == o.Name && n.Address == o.Address && n.Overlay.Equal(o.Overlay)
}

// RosterRoute is a routed name: ROUTE.NODE.internal, or a public name served
// by NODE (split horizon).
type RosterRoute struct {
	Name    string `json:"name"` // the full name
	Node    string `json:"node"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	Module  string `json:"module"`
	Public  bool   `json:"public,omitempty"`
	// TLS says the port serves TLS with a mesh certificate for the
	// route's internal name (spec.Route's TLS).
	TLS bool `json:"tls,omitempty"`
}

// RouteName is the internal name of route on node.
func RouteName(route, node string) string { return route + "." + node + "." + Domain }

// NodeName is the internal name of node.
func NodeName(node string) string { return node + "." + Domain }

// Sort puts the roster in its one order, so equal rosters are equal bytes.
func (r *Roster) Sort() {
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Name < r.Nodes[j].Name })
	sort.Slice(r.Routes, func(i, j int) bool {
		a, b := r.Routes[i], r.Routes[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Node < b.Node
	})
}

// RoutesOf are the routes node serves.
func (r Roster) RoutesOf(node string) []RosterRoute {
	var out []RosterRoute
	for _, rt := range r.Routes {
		if rt.Node == node {
			out = append(out, rt)
		}
	}
	return out
}

// MaxRoster is the cap on a roster message's signed bytes: it travels
// whole in one bus message, and in a roster request's reply (as it is,
// under MaxPayload). About 130 bytes a node serving one route: some 24,000
// such nodes.
const MaxRoster = 3 << 20

// RosterDoc is the roster as its own message: signed with the
// controller's key like a declaration (the ed25519 signature over its exact
// bytes in the Mesh-Sig header), numbered on its own sequence, and
// published once per change on RosterSubject, which the stream republishes
// to every host on RosterDelivery. Its fields are named apart from a
// declaration's (roster_seq, names) so that, decoded strictly, neither is
// ever taken for the other.
type RosterDoc struct {
	Mesh     string    `json:"mesh"`
	Seq      uint64    `json:"roster_seq"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
	Protocol int       `json:"protocol"`
	Names    Roster    `json:"names"`
}

// RosterRef names the roster message a declaration was composed with: a
// host applies the declaration only once it holds that roster or a later
// one.
type RosterRef struct {
	Seq uint64 `json:"seq"`
	// Digest is ContentDigest of the roster message's signed bytes.
	Digest string `json:"digest"`
}

// Check refuses a reference that names nothing.
func (r RosterRef) Check() error {
	if r.Seq == 0 || r.Digest == "" {
		return fmt.Errorf("the roster reference names no roster (sequence %d, digest %q)", r.Seq, r.Digest)
	}
	return nil
}

// RosterRequest asks the controller for the mesh's current roster message,
// on mesh.node.<node>.roster, answered under the node's own inbox: a host
// holding a declaration that names roster Want, which it has not got, or
// (Want 0) one that connected and may have missed a roster message. Have
// and HaveDigest name the roster the host holds (none: 0 and ""): when it
// is the one in force the answer says so (Held) instead of carrying it.
type RosterRequest struct {
	Want       uint64 `json:"want"`
	Have       uint64 `json:"have,omitempty"`
	HaveDigest string `json:"have_digest,omitempty"`
	// Gzip says the host takes the body gzipped (BodyGzip).
	Gzip bool `json:"gzip,omitempty"`
}

// RosterReply is the current roster message: its exact signed bytes and
// the signature, which the host checks as it checks one from the stream.
// The body travels as the JSON it is, not base64, so a roster at MaxRoster
// fits a bus message: encoding/json keeps a raw message's bytes as they are
// when they are compact JSON with HTML escaped, which is what json.Marshal
// made of the roster.
type RosterReply struct {
	Body json.RawMessage `json:"body,omitempty"`
	// BodyGzip is the body gzipped, instead of Body, to a host that said
	// Gzip: a roster of names and addresses is a fifth of itself gzipped,
	// and a fleet that joins asks for it host by host.
	BodyGzip []byte `json:"body_gzip,omitempty"`
	Sig      []byte `json:"sig,omitempty"`
	// Held says the roster the request named is the one in force: no
	// body, nothing to take.
	Held bool `json:"held,omitempty"`
}

// DeclarationRequest asks the controller for the node's last declaration,
// on mesh.node.<node>.declaration, answered under the node's own inbox: a
// host asks each time it connects (nothing delivers a republished
// declaration again), and when it could not keep one. Have names the
// digest of the declaration the host holds ("" none): when it is the last
// the answer says so (Held) instead of carrying it.
type DeclarationRequest struct {
	Have string `json:"have,omitempty"`
}

// DeclarationReply is the node's last declaration as the stream holds it:
// its exact signed bytes (base64: byte for byte, whatever JSON they hold)
// and the signature, checked as one delivered.
type DeclarationReply struct {
	Body []byte `json:"body,omitempty"`
	Sig  []byte `json:"sig,omitempty"`
	Held bool   `json:"held,omitempty"`
}

// Gzip is b gzipped.
func Gzip(b []byte) []byte {
	var out bytes.Buffer
	w, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// Gunzip is b gunzipped, refused past limit bytes (a bomb) or malformed.
func Gunzip(b []byte, limit int) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("gunzip: more than %d bytes", limit)
	}
	return out, nil
}
