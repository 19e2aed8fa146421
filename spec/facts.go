package spec

import (
	"fmt"
	"time"
)

// The bounds of what a machine can report of itself. Facts outside them
// are refused on receipt, naming the field: a node is not trusted, and a
// number no machine has (negative cores, a disk larger than every disk
// made) would be shown and planned with as if true.
const (
	// MaxCores is more cores than any one machine has: 0 is a count the
	// host could not read.
	MaxCores = 1 << 16
	// MaxMemoryBytes is 1 PiB, more memory than any one machine has.
	MaxMemoryBytes = 1 << 50
	// MaxDiskBytes is 1 EiB, more than any one file system holds.
	MaxDiskBytes = 1 << 60
	// MaxUptime is a century.
	MaxUptime = 100 * 365 * 24 * time.Hour
	// maxSystemName is the longest architecture or system name: Go's and
	// uname's are a few characters.
	maxSystemName = 32
)

// Check refuses facts no machine can have, naming the first field that is
// out of bounds: cores, memory or disk out of their bounds, a disk with
// more free than it holds, an uptime below zero or above a century, an
// architecture or a system name not of lower-case letters, digits, '_'
// and '-'. An empty or zero field is one the host could not read, and
// passes.
func (f Facts) Check() error {
	switch {
	case f.Cores < 0 || f.Cores > MaxCores:
		return fmt.Errorf("cores %d: a machine has 1 to %d (0: not read)", f.Cores, MaxCores)
	case f.MemoryBytes > MaxMemoryBytes:
		return fmt.Errorf("memory_bytes %d: more than a machine has (%d)", f.MemoryBytes, uint64(MaxMemoryBytes))
	case f.DiskBytes > MaxDiskBytes:
		return fmt.Errorf("disk_bytes %d: more than a file system holds (%d)", f.DiskBytes, uint64(MaxDiskBytes))
	case f.DiskFree > f.DiskBytes:
		return fmt.Errorf("disk_free_bytes %d: more than the disk's %d", f.DiskFree, f.DiskBytes)
	case f.UptimeSecond < 0 || f.UptimeSecond > int64(MaxUptime/time.Second):
		return fmt.Errorf("uptime_seconds %d: below zero or above a century", f.UptimeSecond)
	}
	if err := checkSystemName("arch", f.Arch); err != nil {
		return err
	}
	return checkSystemName("os", f.OS)
}

// checkSystemName refuses an architecture or system name that is not of
// lower-case letters, digits, '_' and '-', or longer than maxSystemName.
func checkSystemName(field, s string) error {
	if len(s) > maxSystemName {
		return fmt.Errorf("%s of %d bytes: a name is at most %d", field, len(s), maxSystemName)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("%s %q: a name is lower-case letters, digits, '_' and '-'", field, s)
		}
	}
	return nil
}
