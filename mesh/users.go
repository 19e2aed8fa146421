package mesh

import (
	"context"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nkeys"
)

// Keys are the controller's two bus users, made anew at each start.
type Keys struct {
	// Full may do anything in the mesh account: its connection publishes
	// declarations and previews and manages the stream and consumers. It
	// serves no request.
	Full nkeys.KeyPair
	// Serve is the user of the connection that receives requests and the
	// nodes' messages: it may publish only under inboxes
	// (spec.ControllerServePermissions).
	Serve nkeys.KeyPair
}

// NewKeys makes the controller's two bus users.
func NewKeys() (Keys, error) {
	full, err := nkeys.CreateUser()
	if err != nil {
		return Keys{}, fmt.Errorf("generate the controller's bus key: %w", err)
	}
	serve, err := nkeys.CreateUser()
	if err != nil {
		return Keys{}, fmt.Errorf("generate the controller's serving bus key: %w", err)
	}
	return Keys{Full: full, Serve: serve}, nil
}

// Users composes the bus's users from the store: the controller's two
// (one with full power in the mesh account, one that serves and may publish
// only to inboxes), every operator, every node with exactly its own
// subjects (but a node being removed), and the enrolment user of every open
// token: not used, not revoked, not expired. A used or revoked token's
// secret is refused at connect. A store that cannot be read is an error,
// never an empty list.
func Users(ctx context.Context, db Store, keys Keys, now time.Time) ([]broker.User, error) {
	full, err := keys.Full.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("the controller's bus key: %w", err)
	}
	serve, err := keys.Serve.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("the controller's serving bus key: %w", err)
	}
	users := []broker.User{{NKey: full, Full: true}, userOf(serve, spec.ControllerServePermissions())}
	ops, err := db.Operators(ctx)
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		users = append(users, userOf(op.NKey, spec.OperatorPermissions()))
	}
	nodes, err := db.NodeKeys(ctx)
	if err != nil {
		return nil, err
	}
	edges, err := edgeNodes(ctx, db)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if !n.Removing {
			users = append(users, nodeUser(n.Name, n.NKey, edges[n.Name]))
		}
	}
	tokens, err := db.OpenTokens(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range tokens {
		if tokenOpen(t, now) {
			users = append(users, enrolUser(t))
		}
	}
	return users, nil
}

// userOf is the bus user whose key is nkey, with permissions p.
func userOf(nkey string, p spec.Permissions) broker.User {
	return broker.User{NKey: nkey, Publish: p.Publish, Subscribe: p.Subscribe}
}

// nodeUser is the bus user of node, whose key is nkey: exactly its own
// subjects, and the edges' bucket when it is assigned an edge.
func nodeUser(node, nkey string, edge bool) broker.User {
	p := spec.NodePermissions(node)
	if edge {
		e := spec.EdgePermissions()
		p.Publish = append(p.Publish, e.Publish...)
		p.Subscribe = append(p.Subscribe, e.Subscribe...)
	}
	return userOf(nkey, p)
}

// enrolUser is the bus user of t's secret: its enrolment subjects.
func enrolUser(t store.Token) broker.User { return userOf(t.EnrolNKey, spec.EnrolPermissions(t.ID)) }

// tokenOpen says whether t may still be used at now: not used, not revoked, not
// expired.
func tokenOpen(t store.Token, now time.Time) bool {
	return t.Used.IsZero() && t.Revoked.IsZero() && now.Before(t.Expires)
}
