package spec

import (
	"sort"
	"time"
)

// The contract between a machine's launcher (mesh host, mesh controller)
// and the child it runs (mesh serve), kept in files under D/host/versions.
// Two processes of possibly different versions read them, so they are
// defined once, here.
//
//	D/host/versions/<digest>/mesh   a delivered binary, named by the
//	                                lower-case hex SHA-256 of its bytes
//	D/host/versions/want            the digest the node's binary resource
//	                                declares (absent: the mesh manages no
//	                                binary here; the launcher keeps what runs)
//	D/host/versions/launch.json     the launcher's record (Launch)
const (
	VersionsDir   = "versions"
	VersionBinary = "mesh"
	WantFile      = "want"
	LaunchFile    = "launch.json"

	// ExitStandAside is the child's exit status when the version its node
	// wants is delivered and is not the one it runs: the launcher then
	// starts the wanted one. Any other exit of a child not yet healthy is
	// a failure of that version.
	ExitStandAside = 75

	// ReadyFDEnv names the environment variable that carries the number of
	// the file descriptor on which the child writes one line, "ready\n",
	// once it serves: its parts are up and its first heartbeat is sent.
	ReadyFDEnv = "MESH_READY_FD"

	// HeldDNSEnv names the environment variable by which a launcher hands
	// its child the machine's resolver address, bound and held by the
	// launcher so that it stays bound while one child stands aside for the
	// next: "host:port,UDPFD,TCPFD", the descriptors of its UDP socket and
	// its TCP listener. A child serves them when its resolver's address is
	// that one, and closes them otherwise.
	HeldDNSEnv = "MESH_DNS_HELD"

	// MaxFallbacks bounds the fallbacks a heartbeat carries.
	MaxFallbacks = 4
)

// Launch is the launcher's record of the versions it ran.
type Launch struct {
	// Running is the digest the launcher runs now (or last ran).
	Running string `json:"running"`
	// Good is the last digest that reported ready; the launcher falls back
	// to it. Empty until one did: the launcher's own executable is then
	// the fallback.
	Good string `json:"good,omitempty"`
	// Bad are the digests the launcher will not start again, with why.
	Bad map[string]Fallback `json:"bad,omitempty"`
}

// Fallback is a version a launcher gave up on: it exited before it was
// ready, or was not ready within the deadline.
type Fallback struct {
	Digest string    `json:"digest"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Fallbacks are l's bad versions as a heartbeat carries them: newest
// first, at most MaxFallbacks.
func (l Launch) Fallbacks() []Fallback {
	var fs []Fallback
	for d, f := range l.Bad {
		if f.Digest == "" {
			f.Digest = d
		}
		fs = append(fs, f)
	}
	sort.Slice(fs, func(i, j int) bool {
		if !fs[i].At.Equal(fs[j].At) {
			return fs[i].At.After(fs[j].At)
		}
		return fs[i].Digest < fs[j].Digest
	})
	if len(fs) > MaxFallbacks {
		fs = fs[:MaxFallbacks]
	}
	return fs
}
