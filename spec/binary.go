package spec

import (
	"fmt"
	"slices"
	"strings"
)

// KindBinary is the mesh binary a node's launcher should run: a published
// release, delivered as its blob to D/host/versions/<digest>/mesh and
// named in D/host/versions/want. Only a roll composes it (mesh release
// roll); module.json does not declare it.
const KindBinary = "binary"

func init() {
	Register(Kind{Name: KindBinary, Needs: &BinaryDelivery, New: func() Spec { return &BinarySpec{} }})
}

// CapBinaries is the capability a host reports when it holds binary
// resources; a node that does not report it is never sent one (it would
// refuse the whole declaration for an unknown kind).
const CapBinaries = "binaries"

// BinaryDelivery is what a node needs to be sent a binary.
var BinaryDelivery = Capability{Name: CapBinaries, What: "binary delivery",
	Hint: "its host predates the binary kind: run a newer mesh on it by hand once"}

// BinaryModule is the module name a node's binary is declared under: it
// belongs to the node (and the roll), not to any module.
const BinaryModule = "mesh"

// BinaryTarget is a binary's target: one per node.
const BinaryTarget = "binary"

// NodeBinary is the binary resource a roll declares on a node: the release
// r, asked for retry times again (by resumed rolls).
func NodeBinary(r Release, retry int) Resource {
	return Resource{Name: ResourceName(BinaryModule, KindBinary, BinaryTarget), Kind: KindBinary, Module: BinaryModule,
		Spec: &BinarySpec{Digest: r.Digest, Size: r.Size, GOOS: r.GOOS, GOARCH: r.GOARCH, Retry: retry}}
}

// MaxRetry bounds BinarySpec.Retry.
const MaxRetry = 1 << 20

// BinarySpec is a release to run: its digest (the hex SHA-256 of the file,
// its blob "sha256:"+Digest), its size and the target it was built for.
// Retry counts the resumed rolls that asked the node for it again: the
// node's launcher tries a release it marked bad once more for each new
// count (RetryFile), so a node that fell back for a cause since put right
// runs it when its roll is resumed.
type BinarySpec struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	Retry  int    `json:"retry,omitempty"`
}

// Kind is KindBinary.
func (*BinarySpec) Kind() string { return KindBinary }

// Target is BinaryTarget: a node runs one binary.
func (*BinarySpec) Target() string { return BinaryTarget }

// Check refuses a digest that is not 64 lower-case hex digits, a size that
// is not 1 to MaxRelease bytes, and a target that is not two words of
// lower-case letters and digits.
func (b *BinarySpec) Check() error {
	if err := CheckReleaseDigest(b.Digest); err != nil {
		return err
	}
	if b.Size <= 0 || b.Size > MaxRelease {
		return fmt.Errorf("binary size %d is not 1 to %d bytes", b.Size, MaxRelease)
	}
	if b.Retry < 0 || b.Retry > MaxRetry {
		return fmt.Errorf("binary retry %d is not 0 to %d", b.Retry, MaxRetry)
	}
	for _, w := range [][2]string{{"goos", b.GOOS}, {"goarch", b.GOARCH}} {
		if w[1] == "" || len(w[1]) > 32 || strings.Trim(w[1], "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return fmt.Errorf("binary %s %q is not a Go target name such as linux or amd64", w[0], w[1])
		}
	}
	return nil
}

// Fill fills nothing: a roll composes the binary, never settings.
func (b *BinarySpec) Fill(func(field, s string) (string, error)) (Spec, error) {
	c := *b
	return &c, nil
}

// Blobs is the release's blob.
func (b *BinarySpec) Blobs() []Blob {
	return []Blob{{Digest: "sha256:" + b.Digest, Size: b.Size}}
}

// Row lists the binary: its target, size and digest.
func (b *BinarySpec) Row() Row {
	return Row{Target: BinaryTarget, Mode: "-", Owner: "-",
		Content: fmt.Sprintf("%s/%s %d bytes %s", b.GOOS, b.GOARCH, b.Size, b.Digest[:min(12, len(b.Digest))])}
}

// GoArch is a machine's architecture as Go names it (GOARCH), from how
// a host reports it: hosts report runtime.GOARCH, but uname's machine
// names (x86_64, aarch64) are read as the GOARCH they are. "" stays "".
func GoArch(arch string) string {
	switch a := strings.ToLower(strings.TrimSpace(arch)); a {
	case "x86_64", "x86-64", "x64":
		return "amd64"
	case "aarch64", "arm64v8", "armv8", "armv8l":
		return "arm64"
	case "i386", "i486", "i586", "i686":
		return "386"
	case "armv6l", "armv7l":
		return "arm"
	default:
		return a
	}
}

// BinaryFits says why release r cannot be delivered to a machine whose
// facts report arch, os and capabilities (GoArch reads arch), or "" when
// it can: a machine that has not reported its architecture is not known
// to fit, and a host that does not report CapBinaries cannot hold it.
func BinaryFits(r Release, arch, os string, capabilities []string) string {
	switch a := GoArch(arch); {
	case !slices.Contains(capabilities, CapBinaries):
		return fmt.Sprintf("its host does not report the %q capability: %s", CapBinaries, BinaryDelivery.Hint)
	case a == "":
		return "the node has reported no architecture yet (its facts)"
	case a != r.GOARCH:
		return fmt.Sprintf("arch %s release, node is %s", r.GOARCH, a)
	case os != "" && os != r.GOOS:
		return fmt.Sprintf("os %s release, node is %s", r.GOOS, os)
	}
	return ""
}
