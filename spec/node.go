package spec

import "time"

// Heartbeat is what a host publishes every few seconds on
// mesh.node.<node>.heartbeat.
type Heartbeat struct {
	Node       string    `json:"node"`
	Time       time.Time `json:"time"`
	AppliedSeq uint64    `json:"applied_seq"`
	// HostVersion is the SHA-256 of the running executable, hex: the same
	// digest an upgrade uses as the binary's path.
	HostVersion string `json:"host_version"`
	Protocol    int    `json:"protocol"`
	// IntervalMS is how often the host sends a heartbeat, in milliseconds:
	// the controller calls the node silent once it misses two. A host older
	// than this field sends none (zero), and the controller falls back to a
	// fixed window for it.
	IntervalMS int64 `json:"interval_ms,omitempty"`
	// RosterSeq is the roster message the host holds (0: none yet), so
	// status can tell a host that has not taken the roster in force.
	RosterSeq uint64 `json:"roster_seq,omitempty"`
	// Fallbacks are the versions this machine's launcher gave up on (at
	// most MaxFallbacks, newest first): a roll halts on the node that
	// reports the digest it rolls.
	Fallbacks []Fallback `json:"fallbacks,omitempty"`
}

// Facts is what a host reports about its machine, at start and daily, on
// mesh.node.<node>.facts. A field the host could not read is empty or zero
// and named in Errors.
type Facts struct {
	Node         string    `json:"node"`
	Time         time.Time `json:"time"`
	Arch         string    `json:"arch"`
	OS           string    `json:"os"`
	Kernel       string    `json:"kernel"`
	Distro       string    `json:"distro"`
	DistroVer    string    `json:"distro_version"`
	CPUModel     string    `json:"cpu_model"`
	Cores        int       `json:"cores"`
	MemoryBytes  uint64    `json:"memory_bytes"`
	DiskBytes    uint64    `json:"disk_bytes"`
	DiskFree     uint64    `json:"disk_free_bytes"`
	Virtual      string    `json:"virtual"` // "physical", or the hypervisor or container kind
	UptimeSecond int64     `json:"uptime_seconds"`
	Hostname     string    `json:"hostname"`
	// Capabilities are what the host can hold besides files and
	// directories: CapContainers while a container engine answers.
	Capabilities []string `json:"capabilities"`
	// Engine is the container engine's version and API ("20.10.24, API
	// 1.41"), and Subnet the node's container network; empty without one.
	Engine string `json:"engine,omitempty"`
	Subnet string `json:"subnet,omitempty"`
	// TrustInstalled is the trust anchor that holds the mesh's root in the
	// machine's trust store (a trust resource installs it); empty when
	// none does.
	TrustInstalled string `json:"trust_installed,omitempty"`
	// Certificates are the certificates the node's certificate resources
	// serve in their directories now (what ..data names), by path.
	Certificates []HeldCert `json:"certificates,omitempty"`
	// Intermediate is the serial (lower-case hex) of the mesh's
	// intermediate the host holds: the first of the chain its last
	// declaration carried; empty when it holds none yet.
	Intermediate string   `json:"intermediate,omitempty"`
	Errors       []string `json:"errors,omitempty"`
}

// Node is a node as the operator API shows it.
type Node struct {
	Name    string    `json:"name"`
	Address string    `json:"address"`
	Joined  time.Time `json:"joined"`
	// SealKey is the public half of the sealing key the node made when it
	// joined ("x25519:" and base64url); empty for a node that made none.
	SealKey string `json:"seal_key,omitempty"`
	// LastHeard is when the controller last received a heartbeat; nil if
	// never. Heard is the age of that heartbeat when the answer was made.
	LastHeard *time.Time `json:"last_heard"`
	HeardAgo  string     `json:"heard_ago,omitempty"`
	// HeartbeatMS is how often the node said it sends a heartbeat, in
	// milliseconds; zero if it did not say (an older host). SilentAfterMS is
	// how long it may go unheard before status calls it silent.
	HeartbeatMS   int64  `json:"heartbeat_ms,omitempty"`
	SilentAfterMS int64  `json:"silent_after_ms"`
	HostVersion   string `json:"host_version,omitempty"`
	Protocol      int    `json:"protocol,omitempty"`
	// ProtocolKnown is false when the host speaks a protocol this controller
	// does not: refused (ProtocolRefusal), shown as such, not as broken.
	ProtocolKnown bool   `json:"protocol_known"`
	AppliedSeq    uint64 `json:"applied_seq"`
	// RosterSeq is the roster message the host said it holds; zero until
	// it says.
	RosterSeq uint64 `json:"roster_seq,omitempty"`
	// SentSeq is the sequence of the last declaration sent to the node.
	SentSeq uint64 `json:"sent_seq"`
	Facts   *Facts `json:"facts"`
	// LastReport is the node's last report, as it sent it; nil if none.
	LastReport *Report `json:"last_report"`
	// Overlay is the node on the overlay; nil while the overlay is off or
	// the node has no WireGuard key.
	Overlay *NodeOverlay `json:"overlay,omitempty"`
}
