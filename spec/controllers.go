package spec

// ControllerRoleSubject is where every controller of a cluster answers,
// each on its own, with its ControllerRole: what an operator asks when no
// controller serves the API, to learn which are reachable and why none
// leads. Only the leader serves the API's verbs.
const ControllerRoleSubject = APIPrefix + "cluster.role"

// ControllerRole is what one controller of a cluster says it is.
type ControllerRole struct {
	// Server is its cluster server name.
	Server string `json:"server"`
	// Role is "leader", "candidate" or "follower".
	Role string `json:"role"`
	// Leader is the leader's server name as the lease has it, or empty
	// when none leads.
	Leader string `json:"leader,omitempty"`
	// Peers is how many controllers its cluster has, itself among them.
	Peers int `json:"peers,omitempty"`
}

// ControllerRemoveRequest removes the controller Name names (its cluster
// server's name, or its node's) from the controllers' peer set.
type ControllerRemoveRequest struct {
	Name string `json:"name"`
}

// ControllerRemoveResult is the peer set after a removal: the server
// removed, its node (which stays a host of the mesh until removed as a
// node), and the servers left.
type ControllerRemoveResult struct {
	Server string   `json:"server"`
	Node   string   `json:"node,omitempty"`
	Peers  []string `json:"peers"`
}
