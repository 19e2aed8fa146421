package journal

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Fenced writes go as one batch at a time: in a cluster the bus refuses a
// message that expects the lease key's revision while another that
// expects it is in flight (with the wrong-last-sequence error the fence
// itself gives), so concurrent fenced batches refused each other. The
// writes that come while a batch is in flight wait, and go together in
// the next: one fenced batch, its messages consecutive in the log, all
// stored or none. A write waits for at most one batch before its own.

// A group carries at most fenceGroupMsgs messages and fenceGroupBytes of
// them (the bus keeps a batch in memory until it commits, and refuses one
// of more than 1,000 messages), one write at least.
const (
	fenceGroupMsgs  = 256
	fenceGroupBytes = 4 << 20
)

// fenceSendWait bounds the send of one group, whoever's writes it holds:
// a writer's own context bounds only its wait.
const fenceSendWait = 30 * time.Second

// fenceQueue holds the fenced writes waiting to be sent.
type fenceQueue struct {
	mu      sync.Mutex
	waiting []*fenceWrite
	sending bool // a goroutine sends the waiting writes
}

// fenceWrite is one writer's messages, and once sent, what became of
// them: the sequence of its last message, or the group's error.
type fenceWrite struct {
	msgs []*nats.Msg
	ack  *jetstream.PubAck
	err  error
	done chan struct{}
}

// fencedPublish queues msgs to be sent fenced, with the writes waiting
// beside them, and waits for the outcome.
func (j *Journal) fencedPublish(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	w := &fenceWrite{msgs: msgs, done: make(chan struct{})}
	q := &j.fenceQ
	q.mu.Lock()
	q.waiting = append(q.waiting, w)
	if !q.sending {
		q.sending = true
		go j.sendWaiting()
	}
	q.mu.Unlock()
	select {
	case <-w.done:
		return w.ack, w.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// sendWaiting sends the waiting writes, a group at a time, until none
// waits.
func (j *Journal) sendWaiting() {
	q := &j.fenceQ
	for {
		q.mu.Lock()
		if len(q.waiting) == 0 {
			q.sending = false
			q.mu.Unlock()
			return
		}
		n, msgs, size := 0, 0, 0
		for _, w := range q.waiting {
			wsize := 0
			for _, m := range w.msgs {
				wsize += len(m.Subject) + len(m.Data)
			}
			if n > 0 && (msgs+len(w.msgs) > fenceGroupMsgs || size+wsize > fenceGroupBytes) {
				break
			}
			n, msgs, size = n+1, msgs+len(w.msgs), size+wsize
		}
		group := q.waiting[:n:n]
		q.waiting = q.waiting[n:]
		q.mu.Unlock()
		j.sendGroup(group)
	}
}

// sendGroup sends group's messages as one fenced batch and hands each
// write its outcome: the acknowledgement of its own last message (the
// batch's messages are consecutive in the stream), or the batch's error.
func (j *Journal) sendGroup(group []*fenceWrite) {
	var msgs []*nats.Msg
	for _, w := range group {
		msgs = append(msgs, w.msgs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fenceSendWait)
	ack, err := j.sendFenced(ctx, msgs)
	cancel()
	after := uint64(len(msgs))
	for _, w := range group {
		after -= uint64(len(w.msgs))
		if err != nil {
			w.err = err
		} else {
			own := *ack
			own.Sequence = ack.Sequence - after
			w.ack = &own
		}
		close(w.done)
	}
}
