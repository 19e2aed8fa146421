package journal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/lease"
)

// firstEntry is the revision of the log's first entry, through js.
func firstEntry(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, "KV_"+journal.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(lease.Subject(journal.DefaultBucket, "w.>")))
	if err != nil {
		t.Fatal(err)
	}
	return msg.Sequence
}

// leadAlone makes cs[i] the leader: every other campaign is held, as a
// stopped process's would be, until the lease passes to cs[i].
func leadAlone(t *testing.T, cs []*controller, i int) {
	t.Helper()
	for j, c := range cs {
		if j != i {
			c.paused.pause()
		}
	}
	poll.Until(t, 30*time.Second, cs[i].name+" leads", func() error {
		st := cs[i].state()
		if st.Leading {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
}

// restartMarked starts c's journal again on its store, with the
// launcher's put-back mark beside the store.
func restartMarked(t *testing.T, cl *cluster, c *controller, i int) {
	t.Helper()
	c.putBack = c.path + ".put-back"
	if err := os.WriteFile(c.putBack, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.startJournal(t, c.path, cl.connect(t, i))
	if _, err := os.Stat(c.putBack); !os.IsNotExist(err) {
		t.Fatalf("%s's put-back mark is still there: %v", c.name, err)
	}
}

// A fenced journal put back while another controller led and wrote the
// log does not begin a new log once it leads: the log holds writes its
// store never applied, so the log wins, the store follows it, the mark
// goes, and the other's writes stay in every view. Put back again with
// its store holding all the log holds, it begins a new log as an unfenced
// journal does.
func TestPutBackYieldsToALogWrittenSince(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers, a journal stopped and put back")
	c, cs, lead := fencedControllers(t)
	if err := audit(cs[lead].view, "first"); err != nil {
		t.Fatal(err)
	}
	put := (lead + 1) % len(cs)
	poll.Until(t, 10*time.Second, cs[put].name+"'s view has the first write", func() error {
		got := fmt.Sprint(audited(t, cs[put].view))
		if got == "[first]" {
			return nil
		}
		return errors.New(got)
	})
	cs[put].stopJournal()
	if err := audit(cs[lead].view, "second"); err != nil {
		t.Fatal(err)
	}

	leadAlone(t, cs, put)
	restartMarked(t, c, cs[put], put)
	poll.Until(t, 10*time.Second, cs[put].name+"'s view follows the log", func() error {
		got := fmt.Sprint(audited(t, cs[put].view))
		if got == "[first second]" {
			return nil
		}
		return errors.New(got)
	})
	if err := audit(cs[put].view, "third"); err != nil {
		t.Fatalf("the put-back controller's write: %v", err)
	}
	for _, ctl := range cs {
		poll.Until(t, 10*time.Second, ctl.name+"'s view has every write", func() error {
			got := fmt.Sprint(audited(t, ctl.view))
			if got == "[first second third]" {
				return nil
			}
			return errors.New(got)
		})
	}

	js := c.js(t, put)
	last := lastEntry(t, js)
	cs[put].stopJournal()
	restartMarked(t, c, cs[put], put)
	if first := firstEntry(t, js); first <= last {
		t.Fatalf("put back holding the whole log, the log begins at %d, at or before its last entry %d: no new log began", first, last)
	}
	if got := fmt.Sprint(audited(t, cs[put].view)); got != "[first second third]" {
		t.Fatalf("the new log's view: %s", got)
	}
}
