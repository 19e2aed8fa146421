package spec

import (
	"strings"
	"testing"
)

// TestFactsCheck: facts a machine can have pass, those read as zero or
// empty too; each impossible one is refused naming its field.
func TestFactsCheck(t *testing.T) {
	t.Parallel()
	good := Facts{Arch: "amd64", OS: "linux", Cores: 8, MemoryBytes: 32 << 30, DiskBytes: 500 << 30, DiskFree: 100 << 30, UptimeSecond: 3600}
	for _, f := range []Facts{good, {}, {Arch: "x86_64", OS: "linux"}, {Arch: "loong64", Cores: MaxCores}} {
		if err := f.Check(); err != nil {
			t.Errorf("%+v refused: %v", f, err)
		}
	}
	for _, tc := range []struct {
		field string
		bad   func(*Facts)
	}{
		{"cores", func(f *Facts) { f.Cores = -4 }},
		{"cores", func(f *Facts) { f.Cores = MaxCores + 1 }},
		{"memory_bytes", func(f *Facts) { f.MemoryBytes = MaxMemoryBytes + 1 }},
		{"disk_bytes", func(f *Facts) { f.DiskBytes = 1<<64 - 1 }},
		{"disk_free_bytes", func(f *Facts) { f.DiskFree = f.DiskBytes + 1 }},
		{"uptime_seconds", func(f *Facts) { f.UptimeSecond = -1 }},
		{"uptime_seconds", func(f *Facts) { f.UptimeSecond = 1 << 40 }},
		{"arch", func(f *Facts) { f.Arch = "amd64\x1b[2K" }},
		{"arch", func(f *Facts) { f.Arch = "AMD64" }},
		{"arch", func(f *Facts) { f.Arch = strings.Repeat("a", 33) }},
		{"os", func(f *Facts) { f.OS = "linux\u202e" }},
	} {
		f := good
		tc.bad(&f)
		err := f.Check()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+" ") {
			t.Errorf("%+v: refused with %v, want an error naming %s", f, err, tc.field)
		}
	}
}
