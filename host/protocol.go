package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// thisHost names the host in a refusal (spec.ProtocolRefusal).
const thisHost = "this host"

// protocolRefused is why a message of another protocol than this host's is
// refused ("" when it speaks this host's), read before the rest of it is
// decoded: what else it holds may mean something else.
func protocolRefused(raw []byte) string {
	if p := spec.PeekProtocol(raw); p != spec.Protocol {
		return spec.ProtocolRefusal(p, thisHost)
	}
	return ""
}

// upgradeOf is the binary resource a declaration of another protocol
// carries, read as the one thing that stays readable across protocols
// (spec.Protocol): its node, mesh and expiry, and the binary kind alone,
// every other field and resource left unread. False when it carries none,
// or is another node's or mesh's, or expired.
func upgradeOf(raw []byte, k kept, now time.Time) (spec.Resource, bool) {
	var d struct {
		Mesh      string            `json:"mesh"`
		Node      string            `json:"node"`
		Expires   time.Time         `json:"expires"`
		Resources []json.RawMessage `json:"resources"`
	}
	if json.Unmarshal(raw, &d) != nil || d.Node != k.node || d.Mesh != k.mesh || now.After(d.Expires.Add(spec.ClockSkew)) {
		return spec.Resource{}, false
	}
	for _, r := range d.Resources {
		var head struct {
			Kind string `json:"kind"`
		}
		if json.Unmarshal(r, &head) != nil || head.Kind != spec.KindBinary {
			continue
		}
		var res spec.Resource
		if spec.Decode(r, &res) == nil {
			return res, true
		}
	}
	return spec.Resource{}, false
}

// refuseProtocol reports a declaration of another protocol refused, with
// reason, after applying the binary resource it carries, alone: the host
// keeps nothing else of it and removes nothing it holds, so that a roll
// upgrades a host of any protocol to the controller's.
func (a *Agent) refuseProtocol(ctx context.Context, nc *nats.Conn, d delivery) {
	r := spec.Report{Seq: d.decl.Seq, Digest: spec.ContentDigest(d.raw), Refused: d.reason}
	key, err := a.signKey()
	if err != nil {
		a.reports.send(nc, r)
		return
	}
	bin, ok := upgradeOf(d.raw, a.kept(key), time.Now())
	if !ok {
		a.reports.send(nc, r)
		return
	}
	isBinary := func(p Applied) bool { return p.Kind == spec.KindBinary }
	var before []Applied
	for _, p := range a.state.Applied {
		if isBinary(p) {
			before = append(before, p)
		}
	}
	results, applied, _ := a.engine.Apply(ctx, []spec.Resource{bin}, before)
	a.state.Applied = append(slices.DeleteFunc(slices.Clone(a.state.Applied), isBinary), applied...)
	if err := a.save(a.state); err != nil {
		a.log.Error("the binary applied is not recorded", "err", err)
	}
	a.log.Info("binary applied from a declaration of another protocol", "seq", d.decl.Seq, "results", fmt.Sprint(results))
	r.Results = results
	a.reports.send(nc, r)
}
