package spec

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Reply is the envelope of every answer the controller gives (operator API
// calls, enrolments, blob chunks): either Error, with its Kind, or Result.
// EncodeReply writes it and DecodeReply reads it; nothing else should.
type Reply struct {
	Error string `json:"error,omitempty"`
	// Kind says whose the error is (ReplyCaller, ReplyNotFound,
	// ReplyRefused); it is left out for ReplyFailed, so a reply without it
	// is the controller's failure.
	Kind   string          `json:"kind,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Kinds of error a reply carries.
const (
	// ReplyCaller: the call is wrong (a malformed request, a bad argument);
	// nothing was done.
	ReplyCaller = "caller"
	// ReplyNotFound: the call names something the mesh does not hold (no
	// node, module or token by that name); nothing was done.
	ReplyNotFound = "not_found"
	// ReplyRefused: the call is well made, and the mesh's state refuses it
	// (a token already used, the controller's own node removed).
	ReplyRefused = "refused"
	// ReplyFailed: the controller failed to carry the call out.
	ReplyFailed = "failed"
)

// ReplyError is an error a reply carried, as its caller reads it.
type ReplyError struct {
	Kind    string // one of the Reply kinds
	Message string // the controller's words, as it said them
}

func (e *ReplyError) Error() string { return e.Message }

// ReplyKind makes a ReplyError passed on keep its kind.
func (e *ReplyError) ReplyKind() string { return e.Kind }

// CalledWrongly says the call itself is what is wrong (ReplyCaller or
// ReplyNotFound), not the controller or the mesh's state: a CLI exits 2.
func (e *ReplyError) CalledWrongly() bool {
	return e.Kind == ReplyCaller || e.Kind == ReplyNotFound
}

// KindOf is the kind of error err is, for its reply: the kind named by the
// first error in its chain with a ReplyKind() string method, when that is
// a known kind, and ReplyFailed otherwise.
func KindOf(err error) string {
	var k interface{ ReplyKind() string }
	if errors.As(err, &k) {
		switch kind := k.ReplyKind(); kind {
		case ReplyCaller, ReplyNotFound, ReplyRefused, ReplyFailed:
			return kind
		}
	}
	return ReplyFailed
}

// EncodeReply is the reply that answers with err when it is not nil, with
// its kind (KindOf), and with result otherwise.
func EncodeReply(result any, err error) []byte {
	var r Reply
	if err == nil {
		b, merr := json.Marshal(result)
		if merr == nil {
			r.Result = b
		} else {
			err = fmt.Errorf("encode the result: %w", merr)
		}
	}
	if err != nil {
		r.Error = err.Error()
		if r.Error == "" {
			r.Error = "failed without saying why"
		}
		if kind := KindOf(err); kind != ReplyFailed {
			r.Kind = kind
		}
	}
	body, merr := json.Marshal(r)
	if merr != nil { // strings and a result json.Marshal made: cannot happen
		body = []byte(`{"error":"encode the reply failed"}`)
	}
	return body
}

// DecodeReply reads a reply into res (nil: the result is not wanted). An
// error the reply carries is returned as a *ReplyError, whose kind is
// ReplyFailed when the reply names none, or one this side does not know.
func DecodeReply(data []byte, res any) error {
	var r Reply
	if err := Decode(data, &r); err != nil {
		return fmt.Errorf("the controller's reply: %w", err)
	}
	if r.Error != "" {
		kind := r.Kind
		switch kind {
		case ReplyCaller, ReplyNotFound, ReplyRefused, ReplyFailed:
		default:
			kind = ReplyFailed
		}
		return &ReplyError{Kind: kind, Message: r.Error}
	}
	if r.Kind != "" {
		return fmt.Errorf("the controller's reply: an error kind (%q) without an error", r.Kind)
	}
	if res == nil {
		return nil
	}
	if err := Decode(r.Result, res); err != nil {
		return fmt.Errorf("the controller's result: %w", err)
	}
	return nil
}

// NodeListRequest asks for the nodes, by name, from the first after After
// (from the first when empty).
type NodeListRequest struct {
	After string `json:"after,omitempty"`
}

// NodeListResult lists nodes, by name, as many as fit one reply (MaxReply).
// Next, when set, says there are more: ask again with After set to it.
type NodeListResult struct {
	Nodes []Node `json:"nodes"`
	Next  string `json:"next,omitempty"`
}

// NodeShowRequest asks for one node.
type NodeShowRequest struct {
	Name string `json:"name"`
}

// NodeShowResult is one node.
type NodeShowResult struct {
	Node Node `json:"node"`
}

// Addrs is D/addrs.json: the addresses a running mesh actually bound.
type Addrs struct {
	Bus  string `json:"bus,omitempty"` // empty where only a host runs
	HTTP string `json:"http,omitempty"`
	DNS  string `json:"dns,omitempty"`
}

// BusTLSName is the name the bus's certificate carries and every client
// verifies, whatever address it dialled.
const BusTLSName = "mesh-bus"
