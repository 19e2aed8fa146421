package mesh

import (
	"context"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// Users composes the bus's users from the store: the controller (full power
// in the mesh account), every operator, and every node with exactly its own
// subjects. A store that cannot be read is an error, never an empty list.
func Users(ctx context.Context, db *store.DB, controllerKey string) ([]broker.User, error) {
	users := []broker.User{{NKey: controllerKey, Full: true}}
	ops, err := db.Operators(ctx)
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		p := spec.OperatorPermissions()
		users = append(users, broker.User{NKey: op.NKey, Publish: p.Publish, Subscribe: p.Subscribe})
	}
	nodes, err := db.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		p := spec.NodePermissions(n.Name)
		users = append(users, broker.User{NKey: n.NKey, Publish: p.Publish, Subscribe: p.Subscribe})
	}
	return users, nil
}
