package journal

import (
	"context"
	"net/netip"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// grantWrites are the writes of the grants' credentials.
type grantWrites struct{ j *Journal }

type rotateArgs struct {
	Module, Node string
	Credentials  map[string]string
	At           time.Time
}

var (
	putGrants = op[[]store.Grant, none]{"PutGrants", func(ctx context.Context, db *store.DB, gs []store.Grant) (none, error) {
		return none{}, db.PutGrants(ctx, gs)
	}}
	rotateGrants = op[rotateArgs, none]{"RotateGrants", func(ctx context.Context, db *store.DB, a rotateArgs) (none, error) {
		return none{}, db.RotateGrants(ctx, a.Module, a.Node, a.Credentials, a.At)
	}}
)

func grantOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){putGrants.apply, rotateGrants.apply}
}

// PutGrants records gs.
func (w grantWrites) PutGrants(ctx context.Context, gs []store.Grant) error {
	_, err := putGrants.call(ctx, w.j, gs)
	return err
}

// RotateGrants records new credentials of module on node.
func (w grantWrites) RotateGrants(ctx context.Context, module, node string, credentials map[string]string, at time.Time) error {
	_, err := rotateGrants.call(ctx, w.j, rotateArgs{module, node, credentials, at})
	return err
}

// overlayWrites are the writes of the overlay.
type overlayWrites struct{ j *Journal }

type overlayArgs struct {
	CIDR  netip.Prefix
	State spec.OverlayState
	At    time.Time
}

var (
	enableOverlay = op[overlayArgs, int]{"EnableOverlay", func(ctx context.Context, db *store.DB, a overlayArgs) (int, error) {
		return db.EnableOverlay(ctx, a.CIDR, a.At)
	}}
	disableOverlay = op[overlayArgs, bool]{"DisableOverlay", func(ctx context.Context, db *store.DB, a overlayArgs) (bool, error) {
		return db.DisableOverlay(ctx)
	}}
	recordOverlayState = op[overlayArgs, bool]{"RecordOverlayState", func(ctx context.Context, db *store.DB, a overlayArgs) (bool, error) {
		return db.RecordOverlayState(ctx, a.State, a.At)
	}}
)

func overlayOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){enableOverlay.apply, disableOverlay.apply, recordOverlayState.apply}
}

// EnableOverlay turns the overlay on over cidr.
func (w overlayWrites) EnableOverlay(ctx context.Context, cidr netip.Prefix, at time.Time) (int, error) {
	return enableOverlay.call(ctx, w.j, overlayArgs{CIDR: cidr, At: at})
}

// DisableOverlay turns the overlay off.
func (w overlayWrites) DisableOverlay(ctx context.Context) (bool, error) {
	return disableOverlay.call(ctx, w.j, overlayArgs{})
}

// RecordOverlayState records what a host reports of its overlay.
func (w overlayWrites) RecordOverlayState(ctx context.Context, s spec.OverlayState, at time.Time) (bool, error) {
	return recordOverlayState.call(ctx, w.j, overlayArgs{State: s, At: at})
}
