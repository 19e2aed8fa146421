package mesh

import (
	"context"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/spec"
)

// Users composes the bus's users from the store: the controller (full power
// in the mesh account), every operator, every node with exactly its own
// subjects (but a node being removed), and the enrolment user of every token not yet expired. A store
// that cannot be read is an error, never an empty list.
//
// A used or revoked token keeps its enrolment user until it expires, so a
// host that presents it hears why it was refused; the user can do nothing but
// ask, and the controller refuses.
func Users(ctx context.Context, db Store, controllerKey string, now time.Time) ([]broker.User, error) {
	users := []broker.User{{NKey: controllerKey, Full: true}}
	add := func(key string, p spec.Permissions) {
		users = append(users, broker.User{NKey: key, Publish: p.Publish, Subscribe: p.Subscribe})
	}
	ops, err := db.Operators(ctx)
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		add(op.NKey, spec.OperatorPermissions())
	}
	nodes, err := db.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.Removing.IsZero() {
			add(n.NKey, spec.NodePermissions(n.Name))
		}
	}
	tokens, err := db.Tokens(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range tokens {
		if now.Before(t.Expires) {
			add(t.EnrolNKey, spec.EnrolPermissions(t.ID))
		}
	}
	return users, nil
}
