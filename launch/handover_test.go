package launch_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/launch"
	"github.com/miekg/dns"
)

// TestAttachedAddressAnswersAcrossSwaps: each child runs a resolver that
// attaches one address (as a host attaches a bridge gateway's, its
// prefix the only one allowed), while queriers ask it every 5 ms over UDP
// and TCP and the launcher swaps its children four times (each stands
// aside for the other version): not one query fails or is refused, and
// each child after the first was handed the address the one before
// attached (spec.AttachedDNSEnv), with its prefix.
func TestAttachedAddressAnswersAcrossSwaps(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	// A port outside the ephemeral range: the children bind it in turn,
	// and between two of them the kernel must not hand it to another
	// test's outgoing connection.
	at := testport.Addr(t, "127.0.0.1")
	if err := os.WriteFile(filepath.Join(dir, "attach"), []byte(at+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v1, v2 := child(t, "resolver"), child(t, "resolver2")
	start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: v1.path})
	poll.Until(t, 20*time.Second, "the first version good", func() error {
		l := readLaunch(t, dir)
		if l.Good == v1.digest {
			return nil
		}
		return fmt.Errorf("%+v\n%s", l, children(dir))
	})

	quit := make(chan struct{})
	var wg sync.WaitGroup
	var asked, failed atomic.Int64
	failures := make(chan string, 1000)
	for _, network := range []string{"udp", "tcp"} {
		wg.Go(func() {
			c := &dns.Client{Net: network, Timeout: 5 * time.Second}
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-quit:
					return
				case <-tick.C:
				}
				m := new(dns.Msg)
				m.SetQuestion("a.internal.", dns.TypeA)
				r, _, err := c.Exchange(m, at)
				asked.Add(1)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
					failed.Add(1)
					select {
					case failures <- fmt.Sprintf("%s: %v %v", network, err, r):
					default:
					}
				}
			}
		})
	}
	answered := func() {
		before := asked.Load()
		poll.Until(t, 20*time.Second, "20 more queries asked", func() error {
			if asked.Load() >= before+20 {
				return nil
			}
			return fmt.Errorf("%d asked", asked.Load()-before)
		})
	}
	answered()
	for i := range 4 {
		v := []version{v2, v1}[i%2]
		deliver(t, dir, v, true)
		poll.Until(t, 20*time.Second, "the wanted version running and good", func() error {
			l := readLaunch(t, dir)
			if l.Good == v.digest && l.Running == v.digest && strings.Count(children(dir), "start ") == i+2 {
				return nil
			}
			return fmt.Errorf("%+v\n%s", l, children(dir))
		})
		answered()
	}
	close(quit)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Errorf("a query to the attached address failed across a swap: %s", f)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d queries failed across 4 swaps", n, asked.Load())
	}
	log := children(dir)
	if got := len(regexp.MustCompile(`(?m)^given \d+ `+regexp.QuoteMeta(at)+` 127\.0\.0\.0/8$`).FindAllString(log, -1)); got != 4 {
		t.Errorf("%d children were handed %s with 127.0.0.0/8, want the 4 after the first:\n%s", got, at, log)
	}
	t.Logf("%d queries across 4 swaps", asked.Load())
}
