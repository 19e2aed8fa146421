// Package mesh is the control plane: nodes, tokens and enrolment, the
// operator API, modules and assignments, composition of each node's
// declaration, signed and numbered delivery over the bus, reports, status,
// the audit log, and the HTTP listener (/healthz, /metrics, /roots.pem).
package mesh
