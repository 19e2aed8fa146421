package journal

import (
	"context"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// nodeWrites are the writes of the nodes: heartbeats, facts, holds and
// removal.
type nodeWrites struct{ j *Journal }

type heartbeatArgs struct {
	HB spec.Heartbeat
	At time.Time
}

type heartbeatsArgs struct {
	HBs []spec.Heartbeat
	At  time.Time
}

type factsArgs struct {
	Facts spec.Facts
	At    time.Time
}

type nodeAtArgs struct {
	Node   string
	At     time.Time
	Reason string
}

var (
	recordHeartbeat = op[heartbeatArgs, none]{"RecordHeartbeat", func(ctx context.Context, db *store.DB, a heartbeatArgs) (none, error) {
		return none{}, db.RecordHeartbeat(ctx, a.HB, a.At)
	}}
	recordHeartbeats = op[heartbeatsArgs, map[string]error]{"RecordHeartbeats", func(ctx context.Context, db *store.DB, a heartbeatsArgs) (map[string]error, error) {
		return db.RecordHeartbeats(ctx, a.HBs, a.At)
	}}
	recordFacts = op[factsArgs, none]{"RecordFacts", func(ctx context.Context, db *store.DB, a factsArgs) (none, error) {
		return none{}, db.RecordFacts(ctx, a.Facts, a.At)
	}}
	beginRemoval = op[nodeAtArgs, none]{"BeginRemoval", func(ctx context.Context, db *store.DB, a nodeAtArgs) (none, error) {
		return none{}, db.BeginRemoval(ctx, a.Node, a.At)
	}}
	removeNode = op[nodeAtArgs, none]{"RemoveNode", func(ctx context.Context, db *store.DB, a nodeAtArgs) (none, error) {
		return none{}, db.RemoveNode(ctx, a.Node)
	}}
	hold = op[nodeAtArgs, none]{"Hold", func(ctx context.Context, db *store.DB, a nodeAtArgs) (none, error) {
		return none{}, db.Hold(ctx, a.Node, a.At, a.Reason)
	}}
)

func nodeOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){recordHeartbeat.apply, recordHeartbeats.apply, recordFacts.apply,
		beginRemoval.apply, removeNode.apply, hold.apply}
}

// RecordHeartbeat records hb, heard at at.
func (w nodeWrites) RecordHeartbeat(ctx context.Context, hb spec.Heartbeat, at time.Time) error {
	_, err := recordHeartbeat.call(ctx, w.j, heartbeatArgs{hb, at})
	return err
}

// RecordHeartbeats records hbs, heard at at, in one entry.
func (w nodeWrites) RecordHeartbeats(ctx context.Context, hbs []spec.Heartbeat, at time.Time) (map[string]error, error) {
	return recordHeartbeats.call(ctx, w.j, heartbeatsArgs{hbs, at})
}

// RecordFacts records f, received at at.
func (w nodeWrites) RecordFacts(ctx context.Context, f spec.Facts, at time.Time) error {
	_, err := recordFacts.call(ctx, w.j, factsArgs{f, at})
	return err
}

// BeginRemoval marks name as leaving since at.
func (w nodeWrites) BeginRemoval(ctx context.Context, name string, at time.Time) error {
	_, err := beginRemoval.call(ctx, w.j, nodeAtArgs{Node: name, At: at})
	return err
}

// RemoveNode removes name.
func (w nodeWrites) RemoveNode(ctx context.Context, name string) error {
	_, err := removeNode.call(ctx, w.j, nodeAtArgs{Node: name})
	return err
}

// Hold holds node since at, for reason.
func (w nodeWrites) Hold(ctx context.Context, node string, at time.Time, reason string) error {
	_, err := hold.call(ctx, w.j, nodeAtArgs{node, at, reason})
	return err
}

// tokenWrites are the writes of the enrolment tokens.
type tokenWrites struct{ j *Journal }

type tokenArgs struct {
	Token store.Token
	ID    string
	At    time.Time
	Node  store.Node
}

var (
	addToken = op[tokenArgs, none]{"AddToken", func(ctx context.Context, db *store.DB, a tokenArgs) (none, error) {
		return none{}, db.AddToken(ctx, a.Token)
	}}
	revokeToken = op[tokenArgs, none]{"RevokeToken", func(ctx context.Context, db *store.DB, a tokenArgs) (none, error) {
		return none{}, db.RevokeToken(ctx, a.ID, a.At)
	}}
	enrol = op[tokenArgs, none]{"Enrol", func(ctx context.Context, db *store.DB, a tokenArgs) (none, error) {
		return none{}, db.Enrol(ctx, a.ID, a.Node)
	}}
)

func tokenOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){addToken.apply, revokeToken.apply, enrol.apply}
}

// AddToken adds t.
func (w tokenWrites) AddToken(ctx context.Context, t store.Token) error {
	_, err := addToken.call(ctx, w.j, tokenArgs{Token: t})
	return err
}

// RevokeToken revokes token id at at.
func (w tokenWrites) RevokeToken(ctx context.Context, id string, at time.Time) error {
	_, err := revokeToken.call(ctx, w.j, tokenArgs{ID: id, At: at})
	return err
}

// Enrol spends token id on n.
func (w tokenWrites) Enrol(ctx context.Context, id string, n store.Node) error {
	_, err := enrol.call(ctx, w.j, tokenArgs{ID: id, Node: n})
	return err
}
