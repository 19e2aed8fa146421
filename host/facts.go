package host

import (
	"bufio"
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
	} else if fields := strings.Fields(string(up)); len(fields) > 0 {
		if s, err := strconv.ParseFloat(fields[0], 64); err == nil {
			f.UptimeSecond = int64(s)
		}
	}
	f.Virtual = virtualization(cpuFlags)
	return f
}

// virtualization names what the machine runs under: a container runtime, a
// hypervisor (by the DMI vendor when there is one), or "physical".
func virtualization(cpuFlags string) string {
	if _, err := os.Stat("/.dockerenv"); err == nil {
		return "container (docker)"
	}
	if _, err := os.Stat("/run/.containerenv"); err == nil {
		return "container (podman)"
	}
	if !strings.Contains(" "+cpuFlags+" ", " hypervisor ") {
		return "physical"
	}
	for _, p := range []string{"/sys/class/dmi/id/product_name", "/sys/class/dmi/id/sys_vendor"} {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "" {
			return "virtual (" + strings.TrimSpace(string(b)) + ")"
		}
	}
	return "virtual"
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
