package mesh

import (
	"context"
	"fmt"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
)

// ControllerJoins admits controllers into the controllers' cluster: what
// a controller run with --cluster answers a controller's join with.
type ControllerJoins interface {
	// Check refuses j before anything is spent: a server name or a
	// route address the cluster holds already, or no cluster.
	Check(j spec.ControllerJoin) error
	// Join adds j's server, node's, to the cluster's peers and returns
	// the keys every controller shares, with the cluster's state, sealed
	// to to.
	Join(ctx context.Context, node string, j spec.ControllerJoin, to seal.NodePublic) (string, error)
	// Joined is called once the joining controller was answered: the
	// other controllers learn the new peer set, and this one's bus
	// starts again in it.
	Joined(j spec.ControllerJoin)
	// Remove drops the controller named (its server's name or its
	// node's) from the cluster: from JetStream's groups, then from the
	// peer set, which every controller learns, each starting again in
	// it. Its errors carry their reply's kind.
	Remove(ctx context.Context, name string) (spec.ControllerRemoveResult, error)
}

// removeController is the verb cluster.remove: a controller leaves the
// cluster's peer set, by an explicit call only.
func (c *Controller) removeController(ctx context.Context, req spec.ControllerRemoveRequest) (spec.ControllerRemoveResult, error) {
	if c.cfg.Joins == nil {
		return spec.ControllerRemoveResult{}, refusedError("this mesh runs one controller, not a cluster (it was not started with --cluster): there is no controller to remove")
	}
	if req.Name == "" {
		return spec.ControllerRemoveResult{}, callerError("name the controller to remove: its server's name (c-..., as mesh status or a refusal names it) or its node's")
	}
	return c.cfg.Joins.Remove(ctx, req.Name)
}

// checkControllerJoin refuses a request whose kind is not its token's: a
// controller's token joins a controller, a host's a host.
func (en *enrolment) checkControllerJoin(tokenID string, controllerToken bool, req *spec.ControllerJoin) error {
	switch {
	case controllerToken && req == nil:
		return refusedError(fmt.Sprintf("token %s enrols a controller: run mesh controller --join on the machine, not mesh host --join", tokenID))
	case !controllerToken && req != nil:
		return refusedError(fmt.Sprintf("token %s enrols a host: create a controller's token with mesh token create --controller", tokenID))
	case req == nil:
		return nil
	case en.joins == nil:
		return refusedError("this controller runs without --cluster: run it with --cluster HOST:PORT, then create the token again")
	}
	if err := en.joins.Check(*req); err != nil {
		return refusedError(err.Error())
	}
	return nil
}

// joinController adds the controller of req to the cluster once its node
// is recorded: res carries the sealed keys, and after tells the cluster
// once the controller heard its answer.
func (en *enrolment) joinController(ctx context.Context, req spec.EnrolRequest, to seal.NodePublic, res *spec.EnrolResult, after *func()) error {
	if req.Controller == nil {
		return nil
	}
	sealed, err := en.joins.Join(ctx, req.Node, *req.Controller, to)
	if err != nil {
		return fmt.Errorf("node %q recorded, but its controller is not in the cluster: %w; remove the node (mesh node remove %s) and join again", req.Node, err, req.Node)
	}
	res.Controller = sealed
	j := *req.Controller
	*after = func() { en.joins.Joined(j) }
	en.log.Info("controller joined the cluster", "node", req.Node, "server", j.Server, "route", j.Route, "bus", j.Bus)
	return nil
}
