package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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
//	D/host/versions/retry           "DIGEST COUNT": a resumed roll asks
//	                                the launcher to try DIGEST again,
//	                                though it marked it bad (Retry)
const (
	VersionsDir   = "versions"
	VersionBinary = "mesh"
	WantFile      = "want"
	LaunchFile    = "launch.json"
	RetryFile     = "retry"

	// ExitStandAside is the child's exit status when the version its node
	// wants is delivered and is not the one it runs: the launcher then
	// starts the wanted one. Any other exit of a child not yet healthy is
	// a failure of that version.
	ExitStandAside = 75
	// ExitRestart is the child's exit status when the controllers' peer
	// set changed: the launcher starts the same version again, with the
	// sockets it holds, and the bus runs in the new set.
	ExitRestart = 76

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

	// HandOverDNSEnv names the environment variable by which a launcher
	// gives its child the descriptor of one end of a unix socket pair
	// (SOCK_SEQPACKET): as its resolver ends, the child sends on it each
	// address it attached (a bridge gateway's), one message each, "host:port
	// prefix" (the address as bound, the prefix it allowed) with the UDP
	// socket and the TCP listener as SCM_RIGHTS. The launcher hands them to
	// the next child (AttachedDNSEnv), so that those addresses stay bound
	// while one child stands aside for the next.
	HandOverDNSEnv = "MESH_DNS_HANDOVER"

	// AttachedDNSEnv names the environment variable by which a launcher
	// hands its child the attached addresses the child before sent:
	// "host:port,prefix,UDPFD,TCPFD" entries, separated by spaces. The
	// child's resolver serves them as attached from its start.
	AttachedDNSEnv = "MESH_DNS_ATTACHED"

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
	// Retried is, by digest, the last retry count (RetryFile) the launcher
	// honoured: each count clears a bad mark once, never again.
	Retried map[string]int `json:"retried,omitempty"`
}

// Retry is what RetryFile asks: try Digest again, though it is marked bad,
// for the Count-th time (BinarySpec.Retry).
type Retry struct {
	Digest string
	Count  int
}

// Encode is r as RetryFile holds it.
func (r Retry) Encode() []byte { return []byte(fmt.Sprintf("%s %d\n", r.Digest, r.Count)) }

// ParseRetry reads RetryFile's content, refusing anything but a digest and
// a count from 1 to MaxRetry.
func ParseRetry(b []byte) (Retry, error) {
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return Retry{}, fmt.Errorf("retry file: want \"DIGEST COUNT\", got %q", b)
	}
	if err := CheckReleaseDigest(f[0]); err != nil {
		return Retry{}, fmt.Errorf("retry file: %w", err)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n < 1 || n > MaxRetry {
		return Retry{}, fmt.Errorf("retry file: count %q is not 1 to %d", f[1], MaxRetry)
	}
	return Retry{Digest: f[0], Count: n}, nil
}

// ReadRetry reads the RetryFile in the versions directory dir: ok false
// when there is none, or one that does not parse (the host writes it
// whole, and writes it again); a read that failed is an error.
func ReadRetry(dir string) (r Retry, ok bool, err error) {
	body, err := os.ReadFile(filepath.Join(dir, RetryFile))
	if errors.Is(err, os.ErrNotExist) {
		return Retry{}, false, nil
	}
	if err != nil {
		return Retry{}, false, fmt.Errorf("read the retry the node asks for: %w", err)
	}
	r, perr := ParseRetry(body)
	return r, perr == nil, nil
}

// ParseWant reads WantFile's content: the digest the node wants, "" for
// an empty file (no version wanted). Anything but one release digest, a
// line ending aside, is refused: the launcher and its child both read the
// file through here, so a version one of them ignores the other does not
// stand aside for.
func ParseWant(b []byte) (string, error) {
	want := strings.TrimSpace(string(b))
	if want == "" {
		return "", nil
	}
	if err := CheckReleaseDigest(want); err != nil {
		return "", fmt.Errorf("the wanted version: %w", err)
	}
	return want, nil
}

// ReadWant reads WantFile in the versions directory dir: "" when there is
// none. A file that does not parse is ErrBadWant with why; a read that
// failed is another error.
func ReadWant(dir string) (string, error) {
	body, err := os.ReadFile(filepath.Join(dir, WantFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the wanted version: %w", err)
	}
	want, err := ParseWant(body)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrBadWant, filepath.Join(dir, WantFile), err)
	}
	return want, nil
}

// ErrBadWant is a WantFile that names no release digest: no version is
// wanted, and the launcher keeps what it runs.
var ErrBadWant = errors.New("the wanted version is no release digest; ignored")

// Retries says whether l is still to honour r: it marks r's digest bad and
// has not tried it again for r's count.
func (l Launch) Retries(r Retry) bool {
	_, bad := l.Bad[r.Digest]
	return bad && r.Count > l.Retried[r.Digest]
}

// Fallback is a version a launcher gave up on: it exited before it was
// ready, or was not ready within the deadline.
type Fallback struct {
	Digest string    `json:"digest"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Retry is the retry count (Launch.Retried) it was tried under when
	// given up: 0 for its first run. A roll that asked for it again by a
	// higher count reads a fallback of a lower one as from before.
	Retry int `json:"retry,omitempty"`
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
