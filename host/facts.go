package host

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/spec"
)

// GatherFacts reads what it can about this machine. A fact it cannot read is
// left empty and named in Errors: reported as unknown, never guessed.
func GatherFacts() spec.Facts {
	f := spec.Facts{Arch: runtime.GOARCH, OS: runtime.GOOS, Cores: runtime.NumCPU()}
	fail := func(what string, err error) { f.Errors = append(f.Errors, what+": "+err.Error()) }

	var uts syscall.Utsname
	if err := syscall.Uname(&uts); err != nil {
		fail("kernel", err)
	} else {
		f.Kernel = cString(uts.Release[:])
	}
	if h, err := os.Hostname(); err != nil {
		fail("hostname", err)
	} else {
		f.Hostname = h
	}
	if osr, err := keyValues("/etc/os-release", "="); err != nil {
		fail("distribution", err)
	} else {
		f.Distro = unquote(osr["NAME"])
		f.DistroVer = unquote(osr["VERSION_ID"])
		if f.DistroVer == "" {
			f.DistroVer = unquote(osr["VERSION"])
		}
	}
	cpuFlags := ""
	if cpu, err := keyValues("/proc/cpuinfo", ":"); err != nil {
		fail("cpu", err)
	} else {
		f.CPUModel = cpu["model name"]
		cpuFlags = cpu["flags"]
		if f.CPUModel == "" {
			fail("cpu", errors.New("no \"model name\" in /proc/cpuinfo"))
		}
	}
	if mem, err := keyValues("/proc/meminfo", ":"); err != nil {
		fail("memory", err)
	} else if kb, err := strconv.ParseUint(strings.TrimSuffix(mem["MemTotal"], " kB"), 10, 64); err != nil {
		fail("memory", err)
	} else {
		f.MemoryBytes = kb * 1024
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs("/", &st); err != nil {
		fail("disk", err)
	} else {
		f.DiskBytes = st.Blocks * uint64(st.Bsize)
		f.DiskFree = st.Bavail * uint64(st.Bsize)
	}
	if up, err := os.ReadFile("/proc/uptime"); err != nil {
		fail("uptime", err)
	} else if s, err := strconv.ParseFloat(strings.Fields(string(up) + " x")[0], 64); err != nil {
		fail("uptime", fmt.Errorf("/proc/uptime: %w", err))
	} else {
		f.UptimeSecond = int64(s)
	}
	if v, err := virtualization(cpuFlags); err != nil {
		fail("virtualization", err)
	} else {
		f.Virtual = v
	}
	return f
}

// virtualization names what the machine runs under: a container runtime, a
// hypervisor (by the DMI vendor when there is one), or "physical". Without
// the x86 CPU flags it cannot tell, and says so rather than guess.
func virtualization(cpuFlags string) (string, error) {
	if _, err := os.Stat("/.dockerenv"); err == nil {
		return "container (docker)", nil
	}
	if _, err := os.Stat("/run/.containerenv"); err == nil {
		return "container (podman)", nil
	}
	if cpuFlags == "" {
		return "", errors.New("no CPU flags in /proc/cpuinfo to tell a virtual machine from a physical one")
	}
	if !strings.Contains(" "+cpuFlags+" ", " hypervisor ") {
		return "physical", nil
	}
	for _, p := range []string{"/sys/class/dmi/id/product_name", "/sys/class/dmi/id/sys_vendor"} {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "" {
			return "virtual (" + strings.TrimSpace(string(b)) + ")", nil
		}
	}
	return "virtual", nil
}

// keyValues reads "key<sep>value" lines; the first occurrence of a key wins.
func keyValues(path, sep string) (map[string]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, seen := m[k]; !seen {
			m[k] = v
		}
	}
	return m, sc.Err()
}

func unquote(s string) string { return strings.Trim(s, `"'`) }

func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}
