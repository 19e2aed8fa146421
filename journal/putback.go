package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
)

// restartIfPutBack begins a new log from the store when the launcher
// left its mark beside it: the store was put back as it was before a
// version that failed, and the log's later entries are that version's
// writes, given up with it (and maybe writes this version does not
// know). The mark goes once the new log began; a crash before that
// restarts the log again at the next start, from the same store.
func (j *Journal) restartIfPutBack(ctx context.Context) error {
	if j.cfg.PutBackMark == "" {
		return nil
	}
	if _, err := os.Stat(j.cfg.PutBackMark); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read the store's put-back mark: %w", err)
	}
	applied, err := j.db.Applied(ctx)
	if err != nil {
		return err
	}
	if err := j.restart(ctx); err != nil {
		return err
	}
	if err := os.Remove(j.cfg.PutBackMark); err != nil {
		return fmt.Errorf("remove the store's put-back mark: %w", err)
	}
	j.log.Warn("the store was put back by the launcher: a new log begins from it, and the log's entries after it are given up", "applied", applied)
	return nil
}

// binaryVersion names the running binary: its module version and the
// commit it was built from, when known.
func binaryVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "version unknown"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v
}
