package mesh

import (
	"os"
	"strings"
	"syscall"
)

// CrashFile is the file of the controller's directory that makes it die
// at a point of a push, as kill -9 would: a seam for the tests of a push
// cut short (e2e), which write the point's name in it. Nothing of mesh
// writes it. The controller removes it as it dies, so it dies once.
const CrashFile = "crash-at"

// The points of a push at which CrashFile can stop it: its declarations
// numbered and signed, not recorded; recorded (the commit), not
// published; published, before any host's report.
const (
	CrashBeforeRecord  = "before-record"
	CrashBeforePublish = "before-publish"
	CrashBeforeReports = "before-reports"
)

// crashAt kills this process with SIGKILL when the crash file names
// point: nothing after point runs, no deferred call, no flush.
func (s *sender) crashAt(point string) {
	if s.crashFile == "" {
		return
	}
	body, err := os.ReadFile(s.crashFile)
	if err != nil || strings.TrimSpace(string(body)) != point {
		return
	}
	os.Remove(s.crashFile)
	s.log.Warn("the controller dies here, as its crash file says", "point", point, "file", s.crashFile)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal ends the process
}
