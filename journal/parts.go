package journal

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// partSize is the most of an entry one message of the log carries, well
// under the bus's max_payload: a longer entry (the declarations of a push
// to thousands of nodes) is split into parts.
const partSize = 1 << 20

// The headers of a JetStream atomic batch: the stream stores its messages
// together, or none of them.
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// appendEntry puts data, the entry with id, in the log: as one message
// under the entry's key; or, longer than partSize, as parts under the
// keys id.0, id.1... and the last part under the entry's key, all in one
// atomic batch, so the log holds every part, consecutive, or none. The
// entry's revision is that of its last message. A fenced journal's entry
// is a batch fenced by the lease, even of one message.
func (j *Journal) appendEntry(ctx context.Context, id string, data []byte) error {
	if len(data) <= partSize && !j.fenced() {
		_, err := j.kv.Put(ctx, entryKeyPrefix+id, data)
		return err
	}
	var msgs []*nats.Msg
	for k := 0; len(data) > partSize; k++ {
		msgs = append(msgs, &nats.Msg{Subject: j.cfg.prefix() + id + "." + strconv.Itoa(k), Data: data[:partSize]})
		data = data[partSize:]
	}
	msgs = append(msgs, &nats.Msg{Subject: j.cfg.prefix() + id, Data: data})
	if _, err := j.publish(ctx, msgs...); err != nil {
		return fmt.Errorf("append entry %s in %d parts: %w", id, len(msgs), err)
	}
	return nil
}

// parts gathers the parts of an entry as the applier meets them.
type parts struct {
	id   string
	data []byte
}

// add takes the message of revision rev under key: a part is kept, and
// add says it is not an entry; an entry's key gives the whole entry, its
// parts joined.
func (p *parts) add(rev uint64, key string, data []byte) (entry []byte, whole bool, err error) {
	if id, _, isPart := strings.Cut(key, "."); isPart {
		if p.id != "" && p.id != id {
			return nil, false, fmt.Errorf("entry %d of the store's log: a part of entry %s after a part of %s", rev, id, p.id)
		}
		p.id = id
		p.data = append(p.data, data...)
		return nil, false, nil
	}
	if p.id == "" {
		return data, true, nil
	}
	if p.id != key {
		return nil, false, fmt.Errorf("entry %d of the store's log: entry %s after a part of %s", rev, key, p.id)
	}
	entry = append(p.data, data...)
	p.id, p.data = "", nil
	return entry, true, nil
}
