package spec

import "encoding/json"

// Reply is the envelope of every operator API answer: either Error or Result.
type Reply struct {
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
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
