package mesh

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// RenumberGap is how far Renumber raises every sequence: as far above
// the last one sent as a node's claim is believed (spec.MaxSeqAhead). A
// store restored from a copy has forgotten the pushes made since the
// copy; a host applied at most that many more, so every sequence sent
// from the restored store is above any the host has seen, and a claim
// further ahead is one the controller never believes anyway.
const RenumberGap uint64 = spec.MaxSeqAhead

// Renumber signs again, under sequences raised by gap, the last
// declaration sent to each node and the roster in force, in the
// controller's directory dir (D/controller), whose store no process may
// have open: each says what it said, issued at now. A store restored
// from a copy then never sends a host a sequence at or below one it has
// applied: a host refuses those, and the declaration stream that knew
// the later ones is not in the copy. A host asking for its last
// declaration or the roster in force is answered with the renumbered
// one, and takes it.
//
// A node sent nothing before the copy has no sequence here to raise: its
// next is numbered past the one its host reports having applied (the
// claims), as for any store restored from an older copy.
func Renumber(ctx context.Context, dir string, gap uint64, now time.Time) error {
	key, err := LoadSignKey(dir)
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, filepath.Join(dir, DBFile))
	if err != nil {
		return err
	}
	defer db.Close()
	now = now.UTC()
	nodes, err := db.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("renumber: %w", err)
	}
	var ds []store.Declaration
	for _, n := range nodes {
		last, err := db.LastDeclaration(ctx, n.Name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("renumber: %w", err)
		}
		d, err := renumberDeclaration(last, key, gap, now)
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	failed, err := db.RecordDeclarations(ctx, ds)
	if err != nil {
		return fmt.Errorf("renumber the declarations: %w", err)
	}
	for _, d := range ds {
		if err := failed[d.Node]; err != nil {
			return fmt.Errorf("renumber: %w", err)
		}
	}
	r, err := db.LastRoster(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return db.Close()
	}
	if err != nil {
		return fmt.Errorf("renumber: %w", err)
	}
	if r, err = renumberRoster(r, key, gap, now); err != nil {
		return err
	}
	if err := db.RecordRoster(ctx, r); err != nil {
		return fmt.Errorf("renumber: %w", err)
	}
	return db.Close()
}

// renumberDeclaration is last under sequence last.Seq+gap, issued at now
// and expiring as long after as a push's, signed with key.
func renumberDeclaration(last store.Declaration, key ed25519.PrivateKey, gap uint64, now time.Time) (store.Declaration, error) {
	var decl spec.Declaration
	if err := spec.Decode(last.Body, &decl); err != nil {
		return store.Declaration{}, fmt.Errorf("renumber the last declaration of node %q: %w", last.Node, err)
	}
	seq, err := raised(decl.Seq, gap)
	if err != nil {
		return store.Declaration{}, fmt.Errorf("renumber the last declaration of node %q: %w", last.Node, err)
	}
	decl.Seq, decl.Issued, decl.Expires = seq, now, now.Add(spec.DefaultExpiry)
	body, err := json.Marshal(decl)
	if err != nil {
		return store.Declaration{}, fmt.Errorf("renumber the last declaration of node %q: %w", last.Node, err)
	}
	return store.Declaration{Node: last.Node, Seq: seq, Body: body, Sig: ed25519.Sign(key, body),
		Content: last.Content, Sent: decl.Issued, Expires: decl.Expires}, nil
}

// renumberRoster is r under sequence r.Seq+gap, as renumberDeclaration.
func renumberRoster(r store.Roster, key ed25519.PrivateKey, gap uint64, now time.Time) (store.Roster, error) {
	var doc spec.RosterDoc
	if err := spec.Decode(r.Body, &doc); err != nil {
		return store.Roster{}, fmt.Errorf("renumber roster %d: %w", r.Seq, err)
	}
	seq, err := raised(doc.Seq, gap)
	if err != nil {
		return store.Roster{}, fmt.Errorf("renumber roster %d: %w", r.Seq, err)
	}
	doc.Seq, doc.Issued, doc.Expires = seq, now, now.Add(spec.DefaultExpiry)
	body, err := json.Marshal(doc)
	if err != nil {
		return store.Roster{}, fmt.Errorf("renumber roster %d: %w", r.Seq, err)
	}
	return store.Roster{Seq: seq, Body: body, Sig: ed25519.Sign(key, body), Content: r.Content, Sent: doc.Issued, Expires: doc.Expires}, nil
}

// raised is seq+gap, refused past what the store keeps (2^63-1).
func raised(seq, gap uint64) (uint64, error) {
	if seq > math.MaxInt64-gap {
		return 0, fmt.Errorf("sequence %d cannot be raised by %d", seq, gap)
	}
	return seq + gap, nil
}
