// Package release reads a mesh binary as a file: what it is built for (the
// ELF Machine field for the architecture, its Go build information for
// GOOS, GOARCH and the Go version), and whether it is a mesh binary at all.
// The target comes from the file itself, never from a name or a link-time
// stamp, and a release's identity is its SHA-256 (invariant 13). The CLI
// reads a file before it uploads it; the controller reads the stored blob
// again before it records a release. Standard library only.
package release

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// MainPath is a mesh binary's main package, and its module: what its build
// information must name. It recognises a mesh build, it does not
// authenticate one (any module may call itself this): the operator who
// publishes is trusted, and the check is against mistakes (another
// program, a test binary, a file that is not a binary at all).
const MainPath = "github.com/mesh-fleet/mesh"

// Target is what a binary is built for, read from the file.
type Target struct {
	GOOS   string
	GOARCH string
	Go     string // the Go version that built it, as its build information says
}

func (t Target) String() string { return t.GOOS + "/" + t.GOARCH }

// arch is how a known target's GOARCH shows in an ELF header.
type arch struct {
	goos, goarch string
	machine      elf.Machine
	class        elf.Class
	order        binary.ByteOrder
}

// known are the targets the mesh runs on. A target is added here once the
// mesh builds for it (its SQLite and its nats-server do) and a machine of
// it has run it.
var known = []arch{
	{"linux", "amd64", elf.EM_X86_64, elf.ELFCLASS64, binary.LittleEndian},
	{"linux", "arm64", elf.EM_AARCH64, elf.ELFCLASS64, binary.LittleEndian},
}

// Known lists the known targets, as GOOS/GOARCH.
func Known() []string {
	var ts []string
	for _, a := range known {
		ts = append(ts, a.goos+"/"+a.goarch)
	}
	return ts
}

// Refusal is a file that is not a mesh binary of a known target: the
// file's fault, said in one line. Any other error from Read is a failure
// to read the file, never a verdict on it.
type Refusal struct{ msg string }

func (r *Refusal) Error() string { return r.msg }

func refuse(format string, args ...any) error { return &Refusal{fmt.Sprintf(format, args...)} }

// IsRefusal says err is a Refusal: the file is not a mesh binary of a known
// target.
func IsRefusal(err error) bool {
	var r *Refusal
	return errors.As(err, &r)
}

// Read reads the target of the size bytes r holds, refusing (a *Refusal)
// a file that is not an ELF executable, is truncated, is not a Go binary,
// is not mesh, or is built for a target the mesh does not run on or other
// than the one its ELF header says. The ELF OS/ABI byte is not read: Go
// writes "System V" there whatever GOOS is.
func Read(r io.ReaderAt, size int64) (Target, error) {
	rr := &recording{r: r, size: size}
	var magic [4]byte
	if n, _ := rr.ReadAt(magic[:], 0); n < len(magic) || string(magic[:]) != elf.ELFMAG {
		if rr.err != nil {
			return Target{}, rr.err
		}
		head := make([]byte, min(size, 16))
		n, _ := rr.ReadAt(head, 0)
		return Target{}, refuse("not an ELF executable (it begins %q): a mesh binary is a Linux executable built by go build", head[:n])
	}
	f, err := elf.NewFile(rr)
	if rr.err != nil {
		return Target{}, rr.err
	}
	if err != nil {
		if rr.short {
			return Target{}, refuse("truncated: its ELF headers lie past its %d bytes", size)
		}
		return Target{}, refuse("not an ELF executable: %v", err)
	}
	if end := extent(f); end > size {
		return Target{}, refuse("truncated: its ELF headers place data up to byte %d and it holds %d", end, size)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return Target{}, refuse("an ELF %s, not an executable", f.Type)
	}
	info, err := buildinfo.Read(rr)
	if rr.err != nil {
		return Target{}, rr.err
	}
	if err != nil {
		if rr.short {
			return Target{}, refuse("truncated: its Go build information lies past its %d bytes", size)
		}
		return Target{}, refuse("not a Go binary: it carries no Go build information (%v); a mesh binary is built by go build from %s", trimBuildinfo(err), MainPath)
	}
	if info.Path != MainPath || info.Main.Path != MainPath {
		return Target{}, refuse("a Go binary of %s, not mesh (whose main package is %s)", orUnnamed(info.Path), MainPath)
	}
	t := Target{Go: info.GoVersion}
	for _, s := range info.Settings {
		switch s.Key {
		case "GOOS":
			t.GOOS = s.Value
		case "GOARCH":
			t.GOARCH = s.Value
		}
	}
	if t.GOOS == "" || t.GOARCH == "" {
		return Target{}, refuse("its build information names no GOOS or GOARCH (GOOS %q, GOARCH %q)", t.GOOS, t.GOARCH)
	}
	i := slices.IndexFunc(known, func(a arch) bool { return a.goos == t.GOOS && a.goarch == t.GOARCH })
	if i < 0 {
		return Target{}, refuse("built for %s, which the mesh does not run on (it runs on %s)", t, strings.Join(Known(), ", "))
	}
	if a := known[i]; f.Machine != a.machine || f.Class != a.class || f.ByteOrder != a.order {
		return Target{}, refuse("its build information says %s but its ELF header says %s %s %s: the file is not what it claims",
			t, f.Machine, f.Class, byteOrder(f.ByteOrder))
	}
	return t, nil
}

// extent is where the last byte the ELF headers place in the file ends:
// the program and section header tables, each segment's and section's
// bytes.
func extent(f *elf.File) int64 {
	var end int64
	grow := func(off, n uint64) {
		if e := int64(off + n); e > end {
			end = e
		}
	}
	for _, p := range f.Progs {
		grow(p.Off, p.Filesz)
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL {
			grow(s.Offset, s.FileSize)
		}
	}
	return end
}

func byteOrder(o binary.ByteOrder) string {
	if o == binary.BigEndian {
		return "big-endian"
	}
	return "little-endian"
}

func orUnnamed(path string) string {
	if path == "" {
		return "an unnamed main package"
	}
	return path
}

// trimBuildinfo is debug/buildinfo's error without the path it does not
// know ("could not read Go build info from <nil>: ...").
func trimBuildinfo(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// recording reads r, remembering whether a read fell short of the end (the
// file is shorter than its headers say) and the first error that is not
// the end of the file (the file could not be read: a failure, never a
// verdict).
type recording struct {
	r     io.ReaderAt
	size  int64
	short bool
	err   error
}

func (rr *recording) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= rr.size {
		rr.short = true
		return 0, io.EOF
	}
	want := len(p)
	if off+int64(want) > rr.size {
		rr.short = true
		p = p[:rr.size-off]
	}
	n, err := rr.r.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		if rr.err == nil {
			rr.err = fmt.Errorf("read the binary at byte %d: %w", off, err)
		}
		return n, err
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}
