package spec

import "encoding/json"

// Reply is the envelope of every operator API answer: either Error or Result.
type Reply struct {
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// NodeListRequest asks for every node.
type NodeListRequest struct{}

// NodeListResult lists the nodes, by name.
type NodeListResult struct {
	Nodes []Node `json:"nodes"`
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
