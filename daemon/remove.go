package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/spec"
)

// jsServerRemove is JetStream's request to drop a server from its meta
// group (and the streams' groups, whose replicas move to servers that
// join later), asked from the system account of the meta leader's
// cluster.
const jsServerRemove = "$JS.API.SERVER.REMOVE"

// jsServerNotMember is JetStream's answer for a server its meta group
// does not hold: removed already.
const jsServerNotMember = 10044

// Remove drops the controller name names (its server's or its node's)
// from the cluster: JetStream first (a server left in its meta group
// counts against its majority for good), then the peer set, kept here
// and put in the log's bucket beside the servers removed, which every
// controller takes, each starting again in it. The controller that
// answers (the leader) and the last two are refused.
func (c *clusterJoins) Remove(ctx context.Context, name string) (spec.ControllerRemoveResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := ReadClusterState(c.dir)
	if err != nil {
		return spec.ControllerRemoveResult{}, err
	}
	i := slices.IndexFunc(st.Peers, func(p Peer) bool { return p.Server == name || p.Node != "" && p.Node == name })
	if i < 0 {
		return spec.ControllerRemoveResult{}, &spec.ReplyError{Kind: spec.ReplyNotFound,
			Message: fmt.Sprintf("no controller %q in the cluster: its controllers are %s", name, st.peerNames())}
	}
	p := st.Peers[i]
	if len(st.Peers) <= 2 {
		return spec.ControllerRemoveResult{}, &spec.ReplyError{Kind: spec.ReplyRefused,
			Message: fmt.Sprintf("the cluster has %d controllers: removing one would leave a single server, which a cluster cannot run as; join another first", len(st.Peers))}
	}
	if p.Server == st.Server {
		return spec.ControllerRemoveResult{}, &spec.ReplyError{Kind: spec.ReplyRefused,
			Message: fmt.Sprintf("%s leads: it cannot remove itself; stop it (another takes the lead within seconds), then remove it through another controller", p.Server)}
	}
	if err := removeServer(ctx, c.bus, p.Server); err != nil {
		return spec.ControllerRemoveResult{}, fmt.Errorf("remove %s from JetStream's cluster: %w; the peer set is unchanged: run it again", p.Server, err)
	}
	st.Peers = slices.Delete(st.Peers, i, i+1)
	if !slices.Contains(st.Removed, p.Server) {
		st.Removed = append(st.Removed, p.Server)
	}
	if err := WriteClusterState(c.dir, *st); err != nil {
		return spec.ControllerRemoveResult{}, err
	}
	// The peer set changed: the other controllers learn it, and this one
	// runs again in it, once this answer is sent (the controller's
	// serving connection drains its handlers' answers as it stops).
	c.Joined(spec.ControllerJoin{})
	res := spec.ControllerRemoveResult{Server: p.Server, Node: p.Node}
	for _, q := range st.Peers {
		res.Peers = append(res.Peers, q.Server)
	}
	return res, nil
}

// peerNames are the peers' server names, with their nodes' when known.
func (st *ClusterState) peerNames() string {
	var names []string
	for _, p := range st.Peers {
		if p.Node != "" {
			names = append(names, p.Server+" ("+p.Node+")")
		} else {
			names = append(names, p.Server)
		}
	}
	return strings.Join(names, ", ")
}

// removeServer asks JetStream's meta leader to drop server, as a system
// user held on bus for the request alone. A server it no longer holds is
// no error.
func removeServer(ctx context.Context, bus *broker.Server, server string) error {
	if bus == nil {
		return fmt.Errorf("the bus is not running")
	}
	key, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	pub, _ := key.PublicKey()
	if err := bus.AddStandingUser(broker.User{NKey: pub, System: true}); err != nil {
		return err
	}
	defer bus.WithdrawStandingUser(pub)
	nc, err := nats.Connect("", nats.InProcessServer(bus.NATS()), nats.Nkey(pub, key.Sign), nats.Name("controller: cluster remove"))
	if err != nil {
		return fmt.Errorf("connect as the bus's system user: %w", err)
	}
	defer nc.Close()
	body, _ := json.Marshal(map[string]string{"peer": server}) // the server's name
	msg, err := nc.RequestWithContext(ctx, jsServerRemove, body)
	if err != nil {
		return fmt.Errorf("ask JetStream's meta leader: %w", err)
	}
	var res struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &res); err != nil {
		return fmt.Errorf("read JetStream's answer %q: %w", msg.Data, err)
	}
	if res.Error != nil && res.Error.ErrCode != jsServerNotMember {
		return fmt.Errorf("JetStream refused: %s (err_code %d)", res.Error.Description, res.Error.ErrCode)
	}
	return nil
}
