package mesh

import (
	"context"
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// onBlob serves a chunk of a blob that node's last declaration names, and
// nothing else.
func (c *Controller) onBlob(ctx context.Context, m *nats.Msg, who requester) {
	if !c.allowReply(m, who) {
		return
	}
	node := who.name
	reply := func(v any, err error) { c.respond(m, who, spec.EncodeReply(v, err)) }
	var req spec.BlobRequest
	if err := spec.Decode(m.Data, &req); err != nil {
		reply(nil, callerError(fmt.Sprintf("malformed blob request: %v", err)))
		return
	}
	if err := c.blobs.mayFetch(ctx, node, req.Digest); err != nil {
		reply(nil, err)
		return
	}
	data, size, err := c.deps.DB.BlobChunk(ctx, req.Digest, req.Offset, spec.BlobChunk)
	if err != nil {
		reply(nil, err)
		return
	}
	reply(spec.BlobChunkReply{Size: size, Data: data}, nil)
}
