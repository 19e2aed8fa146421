package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// TestContainerStopsAreReportedWithinSeconds: alpha reconciles every 5
// minutes, so only the engine's events can explain what follows. A
// container stopped by hand runs again and the report saying so reaches the
// controller within seconds; it does again after alpha's engine went away
// and came back (the event stream follows the engine again).
func TestContainerStopsAreReportedWithinSeconds(t *testing.T) {
	t.Parallel()
	// alpha reaches the engine through a proxy the test stops and starts:
	// an engine restart that touches no other test's.
	p := &engineProxy{sock: filepath.Join(t.TempDir(), "engine.sock")}
	p.start(t)
	t.Cleanup(p.stop)
	m := newContainerNode(t, "--reconcile", "5m", "--docker", "unix://"+p.sock)
	mustRun(t, "module", "register", "--dir", m.dir, m.webDir)
	mustRun(t, "assign", "--dir", m.dir, "web", m.a)
	push(t, m.dir)
	webID := m.id(t, m.a, "web")

	const web = "web:container:web"
	stopByHand := func(what string) {
		t.Helper()
		stopped := time.Now()
		// meshtls stops at SIGTERM; a second later the engine would kill
		// it.
		timeout := 1
		if _, err := m.cli.ContainerStop(context.Background(), webID, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
			t.Fatal(err)
		}
		// Seconds here; a loaded engine takes tens of seconds to start it
		// (22 s seen beside two other test runs).
		poll.Until(t, time.Minute, what+": alpha reported web started again", func() error {
			res, r, ok := lastResult(t, m.dir, m.a, web)
			if !ok || r.Time.Before(stopped) {
				return fmt.Errorf("last report %+v", r)
			}
			if res.Outcome == spec.Changed && strings.Contains(res.Note, "started again: it had exited with code") {
				return nil
			}
			return fmt.Errorf("%+v", res)
		})
		if got, _ := m.container(t, m.a, "web"); !got.Container.State.Running || got.Container.ID != webID {
			t.Fatalf("%s: alpha's web is running %v, the same container %v", what, got.Container.State.Running, got.Container.ID == webID)
		}
	}
	stopByHand("stopped by hand")
	// status tells it, and it is no problem: web runs again.
	out, _, code := runMesh(t, "status", "--dir", m.dir)
	if code != 0 || !strings.Contains(out, "~ "+m.a+" "+web+": started again: it had exited with code") {
		t.Fatalf("status after web was started again: exit %d\n%s", code, out)
	}

	// The engine goes away and comes back: its event stream is followed
	// again.
	p.stop()
	p.start(t)
	stopByHand("stopped by hand after alpha's engine came back")
}

// TestCrashingContainerFails: a container that exits as soon as it starts:
// alpha (reconciling every 5 minutes, so only the engine's events start
// it) starts it again at most once per pass, passes come at most every
// 2 s, and once it stopped 3 times within 5 minutes it fails, which status
// shows; it is still started again, and the failure says how often it
// stopped. alpha makes no more passes (nor reports) than the rate limit
// lets through.
func TestCrashingContainerFails(t *testing.T) {
	t.Parallel()
	m := newContainerNode(t, "--reconcile", "5m")
	mustRun(t, "module", "register", "--dir", m.dir, webImageModule(t, m.webDir, "crash", `"name":"crash","command":["/bin/sh","-c","exit 3"],"restart":"no"`))
	mustRun(t, "assign", "--dir", m.dir, "crash", m.a)
	push(t, m.dir)
	since, reports := time.Now(), m.metric(t, "mesh_reports_total")
	stopsSaid := regexp.MustCompile(`crash:container:crash: it keeps stopping: (\d+) times in the last 5m0s, last at \S+ with exit code 3 \(docker logs ` + m.a + `-crash says why\)`)
	var failure string
	// Four passes at least 2 s apart; each start of the container takes
	// the engine seconds, tens when it is loaded.
	poll.Until(t, 2*time.Minute, "status says alpha's crash container keeps stopping, 4 times", func() error {
		res, code := statusJSON(t, m.dir)
		for _, n := range res.Nodes {
			if n.Node != m.a {
				continue
			}
			for _, f := range n.Failures {
				if mm := stopsSaid.FindStringSubmatch(f); mm != nil {
					failure = f
					times, _ := strconv.Atoi(mm[1])
					if code != 0 && !res.AllClear && times >= 4 {
						return nil
					}
					return fmt.Errorf("exit %d: %s", code, f)
				}
			}
			return fmt.Errorf("exit %d, alpha's failures %q", code, n.Failures)
		}
		return errors.New("alpha not in status")
	})
	elapsed := time.Since(since)
	reports = m.metric(t, "mesh_reports_total") - reports
	starts := 0
	for _, ev := range engineEvents(t, m.cli, since, m.a) {
		if ev == "container start "+m.a+"-crash" {
			starts++
		}
	}
	// At most one pass every 2 s: that many starts and reports, one more
	// for the first, and one for a pass under way when the window opened.
	limit := int(elapsed/(2*time.Second)) + 2
	if starts < 3 || starts > limit || reports > limit {
		t.Fatalf("in %s: alpha started its crashing container %d times and the controller received %d reports; want 3 to %d starts and at most %d reports (%s)",
			elapsed.Round(time.Millisecond), starts, reports, limit, limit, failure)
	}
}

// TestContainerDeathStormIsPaced: containers of alpha's that nothing
// declares die over and over, eight at a time, the test starting each again
// as soon as it exits. Each death asks alpha for a pass, which finds
// nothing to do and so costs little: unpaced, passes would come as fast as
// the deaths, several a second. Paced, at most one every 2 s, one more for
// the first, one for a pass under way when the storm began. Passes are
// counted in alpha's log (--log-level debug: one that changes nothing says
// so at debug).
func TestContainerDeathStormIsPaced(t *testing.T) {
	optin.NeedSlow(t, "kills containers in a loop for the pacing to show")
	t.Parallel()
	m := newContainerNode(t, "--reconcile", "5m", "--log-level", "debug")
	mustRun(t, "module", "register", "--dir", m.dir, fileModule(t, "motd", "/etc/motd", "hello\n"))
	mustRun(t, "assign", "--dir", m.dir, "motd", m.a)
	push(t, m.dir)
	passes := func() int {
		out := m.d.out.String()
		return strings.Count(out, `msg="reconcile: nothing to change"`) + strings.Count(out, `msg="declaration applied" component=host seq=`)
	}
	image := webImage(t, m.webDir)
	var ids []string
	for i := range 8 {
		c, err := m.cli.ContainerCreate(context.Background(), client.ContainerCreateOptions{Name: fmt.Sprintf("%s-storm%d", m.a, i),
			Config: &container.Config{Image: image, Cmd: []string{"/bin/sh", "-c", "exit 0"}, Labels: map[string]string{spec.LabelNode: m.a}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	const rounds = 3
	since, before := time.Now(), passes()
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			for range rounds {
				ctx := context.Background()
				exited := m.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
				if _, err := m.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
					errs <- err
					return
				}
				select {
				case <-exited.Result:
				case err := <-exited.Error:
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(since)
	made := passes() - before
	limit := int(elapsed/(2*time.Second)) + 2
	if made > limit {
		t.Fatalf("in %s, %d deaths made alpha make %d passes; want at most %d", elapsed.Round(time.Millisecond), len(ids)*rounds, made, limit)
	}
	t.Logf("in %s, %d deaths made %d passes (at most %d)", elapsed.Round(time.Millisecond), len(ids)*rounds, made, limit)
}
