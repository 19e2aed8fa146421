package mesh

import (
	"context"
	"errors"
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// resendIfExpired re-sends the last sent content to a host that has not
// applied it and whose copy expired: re-signed under a new sequence, never
// recomposed (that would push changes nobody pushed).
func (s *sender) resendIfExpired(ctx context.Context, hb spec.Heartbeat) error {
	d, err := s.db.LastDeclaration(ctx, hb.Node)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	now := s.now()
	if hb.AppliedSeq >= d.Seq || now.Before(d.Expires) {
		return nil
	}
	var decl spec.Declaration
	if err := spec.Decode(d.Body, &decl); err != nil {
		return fmt.Errorf("read last declaration of node %q: %w", hb.Node, err)
	}
	seq, _, err := s.send(ctx, hb.Node, contentOf(decl), resendAll)
	if err != nil {
		return err
	}
	s.log.Info("expired declaration re-sent", "node", hb.Node, "was", d.Seq, "seq", seq)
	return nil
}

// redeliver hands hb's node its last recorded declaration again, on its
// delivery subject, as signed: a host that holds it takes it for a
// duplicate, one that missed it applies it. Nothing is recorded or
// numbered anew.
func (s *sender) redeliver(ctx context.Context, hb spec.Heartbeat) error {
	d, err := s.db.LastDeclaration(ctx, hb.Node)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if hb.AppliedSeq >= d.Seq {
		return nil
	}
	if err := s.nc().PublishMsg(signedMsg(spec.DeclarationDelivery(hb.Node), d.Body, d.Sig)); err != nil {
		return fmt.Errorf("hand declaration %d to node %q again: %w", d.Seq, hb.Node, err)
	}
	s.metrics.redelivered.Add(1)
	s.log.Info("declaration handed again to a node that has not applied it", "node", hb.Node, "seq", d.Seq, "applied", hb.AppliedSeq)
	return nil
}
