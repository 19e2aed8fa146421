package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/nats-io/nats.go/jetstream"
)

// restartIfTruth begins a new log from the store when the store, not
// the log, is the truth:
//   - the launcher left its mark beside it: the store was put back as it
//     was before a version that failed, and the log's later entries are
//     that version's writes, given up with it (and maybe writes this
//     version does not know). The mark goes once the new log began; a
//     crash before that restarts the log again, from the same store.
//   - it has applied no revision while the log holds entries: no journal
//     ever began a log from it (a log's first snapshot is at a revision
//     of 1 or more), so it was written directly, by genesis or by a mesh
//     that keeps no log (a fallback to one puts back a store without
//     the launcher's mark), and the log is of another store.
func (j *Journal) restartIfTruth(ctx context.Context) error {
	marked := false
	if j.cfg.PutBackMark != "" {
		_, err := os.Stat(j.cfg.PutBackMark)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("read the store's put-back mark: %w", err)
		}
		marked = err == nil
	}
	applied, err := j.db.Applied(ctx)
	if err != nil {
		return err
	}
	if !marked {
		if applied != 0 {
			return nil
		}
		if _, err := firstEntry(ctx, j.stream, j.cfg); errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		} else if err != nil {
			return err
		}
	}
	if err := j.awaitLead(ctx, "beginning a new log from the store"); err != nil {
		return err
	}
	if marked && j.cfg.Fence != nil {
		// In a cluster the log is kept by every controller: once another
		// led and wrote entries this store never applied, beginning a
		// new log from it would lose acknowledged writes. The log wins,
		// and the store follows it.
		last, err := lastRevision(ctx, j.stream, j.cfg)
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return err
		}
		if err == nil && last > applied {
			if err := os.Remove(j.cfg.PutBackMark); err != nil {
				return fmt.Errorf("remove the store's put-back mark: %w", err)
			}
			j.log.Warn("the store was put back, but another controller wrote the log since: the log wins", "applied", applied, "log", last)
			return nil
		}
	}
	if err := j.restart(ctx); err != nil {
		return err
	}
	if marked {
		if err := os.Remove(j.cfg.PutBackMark); err != nil {
			return fmt.Errorf("remove the store's put-back mark: %w", err)
		}
	}
	j.log.Warn("the store is not a view of the log: a new log begins from it, and the log's entries after it are given up",
		"put_back", marked, "applied", applied)
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
