package release

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/internal/gobuild"
)

// builds are the test's programs, each built once per run, stripped
// (-s -w) as make build strips mesh: a program whose module is MainPath is,
// by its build information, a mesh binary (the check recognises, it does
// not authenticate), and builds in seconds for any target. The real mesh,
// built twice, is e2e's.
var builds *gobuild.Builder

func TestMain(m *testing.M) {
	var err error
	if builds, err = gobuild.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	builds.Close()
	os.Exit(code)
}

// program is the path of a program of module mod built for goos/goarch.
func program(t *testing.T, mod, goos, goarch string) string {
	t.Helper()
	return builds.Binary(t, gobuild.Build{Dir: builds.Program(t, mod), GOOS: goos, GOARCH: goarch, LDFlags: "-s -w"})
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// patched is b with the bytes at off replaced by with.
func patched(b []byte, off int, with ...byte) []byte {
	c := bytes.Clone(b)
	copy(c[off:], with)
	return c
}

// TestRead: the target comes from the file, and everything that is not a
// mesh binary of a known target is refused with its reason.
func TestRead(t *testing.T) {
	t.Parallel()
	amd := readFile(t, program(t, MainPath, "linux", "amd64"))
	arm := readFile(t, program(t, MainPath, "linux", "arm64"))
	riscv := readFile(t, program(t, MainPath, "linux", "riscv64"))
	other := readFile(t, program(t, "example.com/other", "linux", "amd64"))
	trueBin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	arm64Machine := binary.LittleEndian.AppendUint16(nil, uint16(183)) // EM_AARCH64
	for _, tc := range []struct {
		name string
		file []byte
		want string // the target, or the refusal's words
	}{
		{"mesh for linux/amd64", amd, "linux/amd64"},
		{"mesh for linux/arm64", arm, "linux/arm64"},
		// Go writes System V in EI_OSABI whatever GOOS is: the byte says
		// nothing, and is not read.
		{"OS/ABI byte says FreeBSD", patched(amd, 7, 9), "linux/amd64"},
		{"mesh for linux/riscv64", riscv, "refused: built for linux/riscv64, which the mesh does not run on (it runs on linux/amd64, linux/arm64)"},
		{"another Go program", other, "refused: a Go binary of example.com/other, not mesh (whose main package is github.com/mesh-fleet/mesh)"},
		{"a C program (/bin/true)", trueBin, "refused: not a Go binary: it carries no Go build information (not a Go executable)"},
		{"a text file", []byte("#!/bin/sh\necho mesh\n"), `refused: not an ELF executable (it begins "#!/bin/sh\necho m")`},
		{"an empty file", nil, `refused: not an ELF executable (it begins "")`},
		{"truncated to half", amd[:len(amd)/2], "refused: truncated"},
		{"truncated by one byte", amd[:len(amd)-1], "refused: truncated"},
		{"the ELF header alone", amd[:64], "refused: truncated"},
		{"truncated, its section headers kept", headersKept(t, amd), "refused: truncated: its ELF headers place data up to byte"},
		{"a relocatable object", patched(amd, 16, 1, 0), "refused: an ELF ET_REL, not an executable"},
		{"ELF machine other than its build information", patched(amd, 18, arm64Machine...),
			"refused: its build information says linux/amd64 but its ELF header says EM_AARCH64 ELFCLASS64 little-endian: the file is not what it claims"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(bytes.NewReader(tc.file), int64(len(tc.file)))
			var say string
			switch {
			case err == nil:
				say = got.String()
				if got.Go != runtime.Version() {
					t.Errorf("Go version %q, want %q", got.Go, runtime.Version())
				}
			case IsRefusal(err):
				say = "refused: " + err.Error()
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("a refusal is one line: %q", err)
				}
			default:
				t.Fatalf("Read failed, neither a target nor a refusal: %v", err)
			}
			if !strings.HasPrefix(say, tc.want) {
				t.Errorf("Read = %q, want %q", say, tc.want)
			}
		})
	}
}

// headersKept is the ELF64 file b cut at half its length, then its section
// header table and its section names written after the cut (e_shoff and
// the names' section pointing there): headers that parse, describing
// bytes the file no longer holds.
func headersKept(t *testing.T, b []byte) []byte {
	t.Helper()
	le := binary.LittleEndian
	shoff := le.Uint64(b[0x28:])
	shentsize, shnum, shstrndx := uint64(le.Uint16(b[0x3a:])), uint64(le.Uint16(b[0x3c:])), uint64(le.Uint16(b[0x3e:]))
	table := bytes.Clone(b[shoff : shoff+shnum*shentsize])
	names := table[shstrndx*shentsize:]
	namesOff, namesSize := le.Uint64(names[0x18:]), le.Uint64(names[0x20:])
	cut := uint64(len(b)/2) &^ 7
	le.PutUint64(names[0x18:], cut+uint64(len(table)))
	out := append(bytes.Clone(b[:cut]), table...)
	out = append(out, b[namesOff:namesOff+namesSize]...)
	le.PutUint64(out[0x28:], cut)
	return out
}

// failingReader fails every read past the ELF header, as a store that
// stops answering would.
type failingReader struct{ b []byte }

func (f failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= 64 {
		return 0, errors.New("disk I/O error")
	}
	return bytes.NewReader(f.b).ReadAt(p, off)
}

// TestReadFailureIsNoVerdict: a file that could not be read is a failure,
// never "not a mesh binary" (invariant 1).
func TestReadFailureIsNoVerdict(t *testing.T) {
	t.Parallel()
	amd := readFile(t, program(t, MainPath, "linux", "amd64"))
	_, err := Read(failingReader{amd}, int64(len(amd)))
	if err == nil || IsRefusal(err) || !strings.Contains(err.Error(), "disk I/O error") {
		t.Fatalf("Read over a failing reader = %v, want the read's failure, not a refusal", err)
	}
}
