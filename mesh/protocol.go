package mesh

import (
	"encoding/json"
	"sync"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// thisController names the controller in a refusal (spec.ProtocolRefusal).
const thisController = "this controller"

// refusedHosts are the nodes whose host last said, in its heartbeat, a
// protocol other than this controller's, by that protocol. Such a host is
// refused at each handshake that has a reply and served nothing but what
// an upgrade needs: its heartbeats are recorded (status shows its version
// and the refusal), its declaration requests and blob fetches answered
// (a roll's declaration carries the binary, which it applies alone), its
// roster requests refused and its facts dropped.
type refusedHosts struct {
	mu sync.Mutex
	by map[string]int
}

// note records what node's host said; true when the host is refused now
// and was not, or its protocol changed.
func (r *refusedHosts) note(node string, protocol int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	was, ok := r.by[node]
	if protocol == 0 || protocol == spec.Protocol {
		delete(r.by, node)
		return false
	}
	if r.by == nil {
		r.by = map[string]int{}
	}
	r.by[node] = protocol
	return !ok || was != protocol
}

// of is the protocol node's host was refused for, and whether it is.
func (r *refusedHosts) of(node string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.by[node]
	return p, ok
}

// load notes what each node's host last said, at the controller's start.
func (r *refusedHosts) load(nodes []store.Node) {
	for _, n := range nodes {
		r.note(n.Name, n.Protocol)
	}
}

// refusal is the error a refused host's request is answered with.
func refusal(protocol int) error {
	return refusedError(spec.ProtocolRefusal(protocol, thisController))
}

// versionReport is what a heartbeat that does not decode as this
// protocol's says of the host's version, read leniently: the one part of
// a heartbeat every protocol keeps (spec.Protocol). False when it says
// this protocol (then the heartbeat is simply malformed) or none.
func versionReport(data []byte) (spec.Heartbeat, bool) {
	var hb spec.Heartbeat
	if json.Unmarshal(data, &hb) != nil || hb.Protocol == 0 || hb.Protocol == spec.Protocol {
		return spec.Heartbeat{}, false
	}
	return spec.Heartbeat{Node: hb.Node, Time: hb.Time, HostVersion: hb.HostVersion, Protocol: hb.Protocol, IntervalMS: hb.IntervalMS}, true
}
