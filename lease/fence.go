package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The headers of an atomic batch publish (nats-server 2.12 and later),
// which nats.go does not name.
const (
	batchID     = "Nats-Batch-Id"
	batchSeq    = "Nats-Batch-Sequence"
	batchCommit = "Nats-Batch-Commit"
)

// markerTTL is how long a bucket keeps the marker the bus writes when a
// key's TTL ends, when its configuration names none.
const markerTTL = time.Minute

// ErrFenced is a fenced batch the bus refused because a revision it
// expects is not the last: the lease's (the writer no longer holds it),
// or one a message of the batch expects of its own key.
var ErrFenced = errors.New("a revision the batch expects is not the last")

// Subject is the subject key of bucket is written on.
func Subject(bucket, key string) string { return "$KV." + bucket + "." + key }

// Bucket makes the KV bucket cfg describes, or updates it, fit for a lease
// and fenced writes: keys with a TTL of their own (cfg.LimitMarkerTTL, or
// a minute if it is zero, is how long the marker of an ended TTL stays)
// and atomic batches. A bucket that exists is never updated through
// nats.go's KV config, which has no field for atomic batches: that would
// turn them off, however briefly, under a leader writing to it from
// another server.
func Bucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if cfg.LimitMarkerTTL == 0 {
		cfg.LimitMarkerTTL = markerTTL
	}
	name := "KV_" + cfg.Bucket
	stream, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateKeyValue(ctx, cfg)
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return nil, fmt.Errorf("make KV bucket %s: %w", cfg.Bucket, err)
		}
		stream, err = js.Stream(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("read KV bucket %s's stream: %w", cfg.Bucket, err)
	}
	have := stream.CachedInfo().Config
	want := have
	want.Description = cfg.Description
	if cfg.Replicas > 0 {
		want.Replicas = cfg.Replicas
	}
	want.AllowMsgTTL = true
	want.SubjectDeleteMarkerTTL = cfg.LimitMarkerTTL
	want.AllowAtomicPublish = true
	if want.Description != have.Description || want.Replicas != have.Replicas ||
		!have.AllowMsgTTL || have.SubjectDeleteMarkerTTL != want.SubjectDeleteMarkerTTL || !have.AllowAtomicPublish {
		if _, err := js.UpdateStream(ctx, want); err != nil {
			return nil, fmt.Errorf("make KV bucket %s fit for fenced writes: %w", cfg.Bucket, err)
		}
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("open KV bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Fenced publishes msgs as one atomic batch to the stream of bucket, which
// the bus stores whole only if the last revision of leaseKey is still rev,
// and otherwise refuses whole (ErrFenced). Every message that expects no
// revision of its own key (no Nats-Expected-Last-Subject-Sequence header)
// carries the lease's expectation; at least one must. Its subjects must
// be the bucket's, leaseKey's excepted. It returns the ack of the batch's
// last message.
func Fenced(ctx context.Context, js jetstream.JetStream, bucket, leaseKey string, rev uint64, msgs ...*nats.Msg) (*jetstream.PubAck, error) {
	if len(msgs) == 0 {
		return nil, errors.New("fenced publish: no message")
	}
	lease := Subject(bucket, leaseKey)
	id, err := newBatchID()
	if err != nil {
		return nil, err
	}
	fenced := false
	batch := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		if m.Subject == lease {
			return nil, fmt.Errorf("fenced publish: message %d writes the lease key", i+1)
		}
		b := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		for k, v := range m.Header {
			b.Header[k] = append([]string(nil), v...)
		}
		if b.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "" {
			b.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
			b.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, lease)
			fenced = true
		}
		b.Header.Set(batchID, id)
		b.Header.Set(batchSeq, strconv.Itoa(i+1))
		batch[i] = b
	}
	if !fenced {
		return nil, errors.New("fenced publish: every message expects a revision of its own, none can carry the lease's")
	}
	last := batch[len(batch)-1]
	last.Header.Set(batchCommit, "1")
	// The messages before the last are stored aside by the stream until
	// the last commits them; their order on one connection is kept, and
	// one lost makes the commit fail as incomplete.
	nc := js.Conn()
	for _, m := range batch[:len(batch)-1] {
		if err := nc.PublishMsg(m); err != nil {
			return nil, fmt.Errorf("fenced publish: %w", err)
		}
	}
	ack, err := js.PublishMsg(ctx, last)
	if err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return nil, fmt.Errorf("fenced publish: %w: %w", ErrFenced, err)
		}
		return nil, fmt.Errorf("fenced publish: %w", err)
	}
	return ack, nil
}

// newBatchID is a batch's id: random, within the bus's 64 characters.
func newBatchID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("batch id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
