package journal

import (
	"context"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// caWrites are the writes of the CA's records, the mesh's edge storage
// key and the releases.
type caWrites struct{ j *Journal }

type intermediateArgs struct {
	Intermediate store.Intermediate
	Domain       string
}

type nameAtArgs struct {
	Name string
	At   time.Time
}

var (
	keepEdgeStorageKey = op[nameAtArgs, string]{"KeepEdgeStorageKey", func(ctx context.Context, db *store.DB, a nameAtArgs) (string, error) {
		return db.KeepEdgeStorageKey(ctx, a.Name, a.At)
	}}
	addCADomain = op[nameAtArgs, none]{"AddCADomain", func(ctx context.Context, db *store.DB, a nameAtArgs) (none, error) {
		return none{}, db.AddCADomain(ctx, a.Name, a.At)
	}}
	setIntermediate = op[intermediateArgs, none]{"SetIntermediate", func(ctx context.Context, db *store.DB, a intermediateArgs) (none, error) {
		return none{}, db.SetIntermediate(ctx, a.Intermediate, a.Domain)
	}}
	recordCert = op[store.Cert, none]{"RecordCert", func(ctx context.Context, db *store.DB, c store.Cert) (none, error) {
		return none{}, db.RecordCert(ctx, c)
	}}
	publishRelease = op[store.Release, store.Release]{"PublishRelease", func(ctx context.Context, db *store.DB, r store.Release) (store.Release, error) {
		return db.PublishRelease(ctx, r)
	}}
)

func meshOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){keepEdgeStorageKey.apply}
}

func caOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){addCADomain.apply, setIntermediate.apply, recordCert.apply, publishRelease.apply}
}

// meshWrites are the writes of the mesh itself.
type meshWrites struct{ j *Journal }

// KeepEdgeStorageKey keeps sealed as the mesh's edge storage key unless
// one is kept, and returns the one kept.
func (w meshWrites) KeepEdgeStorageKey(ctx context.Context, sealed string, at time.Time) (string, error) {
	return keepEdgeStorageKey.call(ctx, w.j, nameAtArgs{sealed, at})
}

// AddCADomain adds the CA's domain name.
func (w caWrites) AddCADomain(ctx context.Context, name string, at time.Time) error {
	_, err := addCADomain.call(ctx, w.j, nameAtArgs{name, at})
	return err
}

// SetIntermediate makes in the intermediate that signs, with domain.
func (w caWrites) SetIntermediate(ctx context.Context, in store.Intermediate, domain string) error {
	_, err := setIntermediate.call(ctx, w.j, intermediateArgs{in, domain})
	return err
}

// RecordCert records the certificate c.
func (w caWrites) RecordCert(ctx context.Context, c store.Cert) error {
	_, err := recordCert.call(ctx, w.j, c)
	return err
}

// PublishRelease publishes r.
func (w caWrites) PublishRelease(ctx context.Context, r store.Release) (store.Release, error) {
	return publishRelease.call(ctx, w.j, r)
}
