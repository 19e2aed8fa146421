package journal

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mesh-fleet/mesh/store"
)

// applyFunc applies one entry's arguments to the view.
type applyFunc func(ctx context.Context, db *store.DB, args json.RawMessage) (any, error)

// op is one write of the store as the log carries it: its name in an
// entry, its arguments A (every input the write depends on, so each view
// applying it does the same), and the store method that makes it,
// returning R.
type op[A, R any] struct {
	name string
	run  func(ctx context.Context, db *store.DB, a A) (R, error)
}

// call appends the write with a to the log and returns what applying it
// to the view returned.
func (o op[A, R]) call(ctx context.Context, j *Journal, a A) (R, error) {
	res, err := j.write(ctx, o.name, a)
	r, _ := res.(R)
	return r, err
}

// apply is how the view applies the write's entries.
func (o op[A, R]) apply() (string, applyFunc) {
	return o.name, func(ctx context.Context, db *store.DB, raw json.RawMessage) (any, error) {
		var a A
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, fmt.Errorf("read the arguments of %s: %w", o.name, err)
		}
		r, err := o.run(ctx, db, a)
		return r, err
	}
}

// none is the result of a write that returns only an error.
type none struct{}

// applyFuncs are the writes the log carries, by name.
func applyFuncs() map[string]applyFunc {
	fs := map[string]applyFunc{}
	for _, add := range [][]func() (string, applyFunc){meshOps(), nodeOps(), tokenOps(), moduleOps(), blobOps(), recordOps(), caOps(), rollOps(), grantOps(), overlayOps()} {
		for _, f := range add {
			name, fn := f()
			if _, dup := fs[name]; dup {
				panic("journal: two writes named " + name)
			}
			fs[name] = fn
		}
	}
	return fs
}
