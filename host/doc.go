// Package host is the agent every node runs: it holds the node's own bus
// credential, receives the node's declarations, verifies their signature and
// sequence, applies them under its root (one applier per resource kind),
// removes what is no longer declared, and reports; it sends heartbeats and
// facts, corrects drift at each reconcile, and keeps the machine's resolver
// serving the mesh's names to its containers.
package host
