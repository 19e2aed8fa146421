package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/lease"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPartitionedLeaderStepsDown: one of three campaigners, each on its
// own server of a cluster, leads; when its server goes, it steps down
// within the TTL, and another leads, never two at once.
func TestPartitionedLeaderStepsDown(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers, one shut down, and a lease waited out")
	b := startBus(t, 3)
	bucket(t, b.js(t, 0), 3)
	var cs []*campaigner
	for i := range 3 {
		cs = append(cs, campaign(t, b.js(t, i), fmt.Sprintf("c%d", i), nil))
	}
	old := waitLeader(t, 60*time.Second, "one of three leads", cs)

	b.stops[old]()
	poll.Until(t, ttl, "the partitioned leader steps down within the TTL", func() error {
		st := cs[old].state()
		if !st.Leading && st.Role == lease.Follower {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	next := waitLeader(t, 60*time.Second, "another leads", cs, old)
	if st := cs[old].state(); st.Leading {
		t.Fatalf("the partitioned leader leads again beside %s: %+v", cs[next].name, st)
	}
}

// TestPausedLeaderIsFenced: a leader held past the TTL (as a stopped
// process is) does not lead when it resumes, another leads meanwhile, and
// a write fenced by the revision it held is refused while the new
// leader's is stored.
func TestPausedLeaderIsFenced(t *testing.T) {
	t.Parallel()
	b := startBus(t, 1)
	js := b.js(t, 0)
	kv := bucket(t, js, 1)
	cs := []*campaigner{campaign(t, js, "a", nil), campaign(t, js, "b", nil), campaign(t, js, "c", nil)}
	old := waitLeader(t, 30*time.Second, "one of three leads", cs)
	held := cs[old].state().Revision

	cs[old].pause.pause()
	poll.Until(t, ttl, "the paused leader is held", func() error {
		if cs[old].pause.isHeld() {
			return nil
		}
		return errors.New("not yet")
	})
	next := waitLeader(t, 30*time.Second, "another leads while the leader is paused", cs, old)
	if st := cs[old].state(); st.Leading {
		t.Fatalf("the paused leader still leads: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs[old].Put(ctx, "k", []byte("late")); !errors.Is(err, lease.ErrNotLeader) {
		t.Fatalf("the paused leader's write: %v, want %v", err, lease.ErrNotLeader)
	}
	late := &nats.Msg{Subject: lease.Subject(bucketName, "k"), Data: []byte("late")}
	if _, err := lease.Fenced(ctx, js, bucketName, leaseKey, held, late); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("a write fenced by the deposed leader's revision: %v, want %v", err, lease.ErrFenced)
	}
	if _, err := cs[next].Put(ctx, "k", []byte("new")); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}

	cs[old].pause.resume()
	poll.Until(t, ttl, "the resumed leader steps down", func() error {
		st := cs[old].state()
		if st.Role == lease.Follower {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	if got := leading(cs); len(got) != 1 || got[0] != cs[next].name {
		t.Fatalf("after the old leader resumed, leading: %q, want %s alone", got, cs[next].name)
	}
	e, err := kv.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != "new" {
		t.Fatalf("k holds %q, want the new leader's write", e.Value())
	}
}

// TestClockSkewDoesNotDecide: campaigners whose clocks are a minute ahead
// and a minute behind keep or take the lease as one with a right clock
// does: the leader keeps it across renewals while another campaigns, and
// the next takes it when it goes.
func TestClockSkewDoesNotDecide(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three campaigners' leases waited out at ±60 s skew")
	b := startBus(t, 1)
	js := b.js(t, 0)
	bucket(t, js, 1)
	skewed := func(d time.Duration) func() time.Time {
		return func() time.Time { return time.Now().Add(d) }
	}
	ahead := campaign(t, js, "ahead", skewed(time.Minute))
	waitLeader(t, 30*time.Second, "the campaigner ahead leads", []*campaigner{ahead})
	behind := campaign(t, js, "behind", skewed(-time.Minute))
	keeps(t, ahead, behind)

	ahead.stop()
	waitLeader(t, 30*time.Second, "the campaigner behind leads once the one ahead goes", []*campaigner{ahead, behind})
	right := campaign(t, js, "right", nil)
	keeps(t, behind, right)
}

// keeps checks leader leads across three renewals while other campaigns
// and never leads.
func keeps(t *testing.T, leader, other *campaigner) {
	t.Helper()
	seen := map[uint64]bool{}
	poll.Until(t, 10*ttl, leader.name+" renews three times while "+other.name+" campaigns", func() error {
		st := leader.state()
		if !st.Leading {
			t.Fatalf("%s stopped leading: %+v", leader.name, st)
		}
		if o := other.state(); o.Role != lease.Follower {
			t.Fatalf("%s took the lease from %s: %+v", other.name, leader.name, o)
		}
		seen[st.Revision] = true
		if len(seen) > 3 {
			return nil
		}
		return fmt.Errorf("revisions seen: %d", len(seen))
	})
}

// TestFencedBatchIsAtomic: a fenced batch one of whose messages expects a
// revision its key does not have stores nothing; the same batch expecting
// the right one stores every message.
func TestFencedBatchIsAtomic(t *testing.T) {
	t.Parallel()
	b := startBus(t, 1)
	js := b.js(t, 0)
	kv := bucket(t, js, 1)
	c := campaign(t, js, "a", nil)
	waitLeader(t, 30*time.Second, "the campaigner leads", []*campaigner{c})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev, err := kv.Put(ctx, "b", []byte("b0"))
	if err != nil {
		t.Fatal(err)
	}
	batch := func(expect uint64) []*nats.Msg {
		b := nats.NewMsg(lease.Subject(bucketName, "b"))
		b.Data = []byte("b1")
		b.Header.Set(jetstream.ExpectedLastSubjSeqHeader, fmt.Sprint(expect))
		return []*nats.Msg{{Subject: lease.Subject(bucketName, "a"), Data: []byte("a1")}, b}
	}
	if _, err := c.Publish(ctx, batch(rev+100)...); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("a batch expecting a wrong revision of b: %v, want %v", err, lease.ErrFenced)
	}
	if _, err := kv.Get(ctx, "a"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a after the refused batch: %v, want it not found", err)
	}
	ack, err := c.Publish(ctx, batch(rev)...)
	if err != nil {
		t.Fatalf("the batch expecting b's revision: %v", err)
	}
	for key, want := range map[string]string{"a": "a1", "b": "b1"} {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Value()) != want {
			t.Errorf("%s holds %q, want %q", key, e.Value(), want)
		}
	}
	if e, _ := kv.Get(ctx, "b"); e.Revision() != ack.Sequence {
		t.Errorf("b's revision %d, the batch's ack %d: b is the batch's last message", e.Revision(), ack.Sequence)
	}
}

// TestNewChecksConfig: a campaign without what it needs, or with a TTL
// the bus cannot keep, is refused.
func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	b := startBus(t, 1)
	js := b.js(t, 0)
	good := lease.Config{Bucket: bucketName, Key: leaseKey, Name: "a", TTL: ttl}
	for _, tc := range []struct {
		name   string
		change func(*lease.Config)
	}{
		{"no bucket", func(c *lease.Config) { c.Bucket = "" }},
		{"no name", func(c *lease.Config) { c.Name = "" }},
		{"a TTL under a second", func(c *lease.Config) { c.TTL = 500 * time.Millisecond }},
		{"a TTL of part seconds", func(c *lease.Config) { c.TTL = 1500 * time.Millisecond }},
	} {
		cfg := good
		tc.change(&cfg)
		if _, err := lease.New(cfg, quiet(), lease.Deps{JS: js}); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := lease.New(good, quiet(), lease.Deps{}); err == nil {
		t.Error("no JetStream: accepted")
	}
}

// TestLeadsOnlyAfterARenewal: a campaigner that created the key is a
// candidate, not leading, until its first renewal succeeds.
func TestLeadsOnlyAfterARenewal(t *testing.T) {
	t.Parallel()
	b := startBus(t, 1)
	js := b.js(t, 0)
	bucket(t, js, 1)
	c, err := lease.New(lease.Config{Bucket: bucketName, Key: leaseKey, Name: "a", TTL: ttl}, quiet(), lease.Deps{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	st, changed := c.Leader()
	if st.Role != lease.Follower || st.Leading {
		t.Fatalf("before campaigning: %+v, want a follower", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var roles []lease.Role
	for len(roles) < 2 {
		select {
		case <-changed:
		case <-time.After(10 * ttl):
			t.Fatalf("roles taken: %v, want a candidate then a leader", roles)
		}
		st, changed = c.Leader()
		roles = append(roles, st.Role)
		if st.Role == lease.Candidate && st.Leading {
			t.Fatalf("a candidate leads: %+v", st)
		}
		if st.Revision == 0 {
			t.Fatalf("a campaigner holding the key has no revision: %+v", st)
		}
	}
	if roles[0] != lease.Candidate || roles[1] != lease.Leader {
		t.Fatalf("roles taken: %v, want candidate then leader", roles)
	}
	if st, _ := c.Leader(); !st.Leading {
		t.Fatalf("after its first renewal: %+v, want leading", st)
	}
}

// TestOwnNameInTheKeyIsTakenAgain: a campaigner that finds the key
// holding its own name (its renewal's acknowledgement lost, or its
// process restarted) leads again at once rather than after the TTL; a
// key holding another's name is left to it.
func TestOwnNameInTheKeyIsTakenAgain(t *testing.T) {
	t.Parallel()
	b := startBus(t, 1)
	js := b.js(t, 0)
	kv := bucket(t, js, 1)
	ctx := t.Context()
	// A lease far longer than the test: only taking it again leads.
	if _, err := kv.Create(ctx, leaseKey, []byte("a"), jetstream.KeyTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	other := campaign(t, js, "b", nil)
	own := campaign(t, js, "a", nil)
	poll.Until(t, ttl, "the campaigner named in the key leads", func() error {
		st := own.state()
		if st.Leading {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	if st := other.state(); st.Role != lease.Follower {
		t.Fatalf("the campaigner whose name the key does not hold: %+v", st)
	}
}

// TestRenewalOutlastsFencedWrites: a leader whose fenced writes are in
// flight at every moment (as the journal's appends are under load) keeps
// the lease: the bus refuses a renewal while a write expecting the key's
// revision is in flight, and the renewal is sent again rather than the
// leader stepping down.
func TestRenewalOutlastsFencedWrites(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers and a lease renewed under fenced writes")
	b := startBus(t, 3)
	js := b.js(t, 0)
	bucket(t, js, 3)
	c := campaign(t, js, "a", nil)
	poll.Until(t, 30*time.Second, "the campaigner leads", func() error {
		st := c.state()
		if st.Leading {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var writers sync.WaitGroup
	for w := range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := 0; ctx.Err() == nil; i++ {
				st := c.state()
				msg := &nats.Msg{Subject: lease.Subject(bucketName, fmt.Sprintf("w.%d.%d", w, i)), Data: []byte("x")}
				lease.Fenced(ctx, js, bucketName, leaseKey, st.Revision, msg)
			}
		}()
	}
	// Every change of the campaigner's standing is looked at, for three
	// TTLs: none may be a step-down.
	over := time.After(3 * ttl)
	for done := false; !done; {
		st, changed := c.Leader()
		if st.Role != lease.Leader {
			cancel()
			writers.Wait()
			t.Fatalf("the leader stepped down under its own fenced writes: %+v", st)
		}
		select {
		case <-over:
			done = true
		case <-changed:
		}
	}
	cancel()
	writers.Wait()
}

// TestBucketOpenedAgainIsNotUpdated: a controller opening the bucket that
// exists leaves its stream alone. nats.go's KV config has no field for
// atomic batches, so an update through it turns them off until the next
// update turns them on: a leader's fenced write on another server between
// the two failed with "atomic publish is disabled".
func TestBucketOpenedAgainIsNotUpdated(t *testing.T) {
	t.Parallel()
	b := startBus(t, 1)
	js := b.js(t, 0)
	bucket(t, js, 1)
	updates, err := js.Conn().SubscribeSync("$JS.EVENT.ADVISORY.STREAM.UPDATED.KV_" + bucketName)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	kv := bucket(t, js, 1)
	if _, err := kv.Put(context.Background(), "a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := updates.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("the bucket opened again updated its stream: %s", m.Data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+bucketName)
	if err != nil {
		t.Fatal(err)
	}
	if !s.CachedInfo().Config.AllowAtomicPublish {
		t.Fatal("the bucket does not allow atomic batches")
	}
}
