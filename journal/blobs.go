package journal

import (
	"context"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// blobWrites are the writes of the blobs, whole or chunk by chunk, and
// their collection.
type blobWrites struct{ j *Journal }

type blobArgs struct {
	Digest string
	Offset int64
	Size   int64
	Data   []byte
	Hash   []byte
	Whole  bool
	Before time.Time
	At     time.Time
}

var (
	putBlob = op[blobArgs, none]{"PutBlob", func(ctx context.Context, db *store.DB, a blobArgs) (none, error) {
		return none{}, db.PutBlob(ctx, a.Digest, a.Data, a.At)
	}}
	touchBlob = op[blobArgs, bool]{"TouchBlob", func(ctx context.Context, db *store.DB, a blobArgs) (bool, error) {
		return db.TouchBlob(ctx, a.Digest, a.At)
	}}
	collectBlobs = op[blobArgs, []store.CollectedBlob]{"CollectBlobs", func(ctx context.Context, db *store.DB, a blobArgs) ([]store.CollectedBlob, error) {
		return db.CollectBlobs(ctx, a.Before, a.At)
	}}
	beginUpload = op[blobArgs, bool]{"BeginUpload", func(ctx context.Context, db *store.DB, a blobArgs) (bool, error) {
		return db.BeginUpload(ctx, a.Digest, a.Size, a.At)
	}}
	putUploadChunk = op[blobArgs, none]{"PutUploadChunk", func(ctx context.Context, db *store.DB, a blobArgs) (none, error) {
		return none{}, db.PutUploadChunk(ctx, a.Digest, a.Offset, a.Data, a.Hash, a.Whole, a.At)
	}}
	dropUpload = op[blobArgs, none]{"DropUpload", func(ctx context.Context, db *store.DB, a blobArgs) (none, error) {
		return none{}, db.DropUpload(ctx, a.Digest)
	}}
	dropUploadsBefore = op[blobArgs, int]{"DropUploadsBefore", func(ctx context.Context, db *store.DB, a blobArgs) (int, error) {
		return db.DropUploadsBefore(ctx, a.Before)
	}}
)

func blobOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){putBlob.apply, touchBlob.apply, collectBlobs.apply,
		beginUpload.apply, putUploadChunk.apply, dropUpload.apply, dropUploadsBefore.apply}
}

// PutBlob keeps data as the blob digest.
func (w blobWrites) PutBlob(ctx context.Context, digest string, data []byte, at time.Time) error {
	_, err := putBlob.call(ctx, w.j, blobArgs{Digest: digest, Data: data, At: at})
	return err
}

// TouchBlob marks the blob digest used at at.
func (w blobWrites) TouchBlob(ctx context.Context, digest string, at time.Time) (bool, error) {
	return touchBlob.call(ctx, w.j, blobArgs{Digest: digest, At: at})
}

// CollectBlobs collects the blobs nothing holds, unused since before.
func (w blobWrites) CollectBlobs(ctx context.Context, before, at time.Time) ([]store.CollectedBlob, error) {
	return collectBlobs.call(ctx, w.j, blobArgs{Before: before, At: at})
}

// BeginUpload begins the upload of the blob digest of size bytes.
func (w blobWrites) BeginUpload(ctx context.Context, digest string, size int64, at time.Time) (bool, error) {
	return beginUpload.call(ctx, w.j, blobArgs{Digest: digest, Size: size, At: at})
}

// PutUploadChunk keeps one chunk of the upload of digest: its bytes in
// the blobs' object store, its entry naming them.
func (w blobWrites) PutUploadChunk(ctx context.Context, digest string, offset int64, data, hash []byte, whole bool, at time.Time) error {
	return w.j.putUploadChunk(ctx, digest, offset, data, hash, whole, at)
}

// DropUpload drops the upload of digest.
func (w blobWrites) DropUpload(ctx context.Context, digest string) error {
	_, err := dropUpload.call(ctx, w.j, blobArgs{Digest: digest})
	return err
}

// DropUploadsBefore drops the uploads untouched since before.
func (w blobWrites) DropUploadsBefore(ctx context.Context, before time.Time) (int, error) {
	return dropUploadsBefore.call(ctx, w.j, blobArgs{Before: before})
}
