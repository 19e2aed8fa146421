package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"
)

// PushNodeOutcome is what a push came to for one node, as --json prints it.
type PushNodeOutcome struct {
	spec.PushNode
	Report   *spec.Report `json:"report"`
	Answered bool         `json:"answered"`
}

// PushOutcome is what a push came to, as --json prints it.
type PushOutcome struct {
	ID     string            `json:"id"`
	Nodes  []PushNodeOutcome `json:"nodes"`
	Silent []string          `json:"silent"`
	// Roster is the roster message the push sent and which hosts took it;
	// nil when the names had not changed.
	Roster *RosterOutcome `json:"roster,omitempty"`
	// Lost says when and why the connection to the controller ended
	// during the wait; Silent then names the nodes sent to and not heard
	// from before it.
	Lost string `json:"lost,omitempty"`
	OK   bool   `json:"ok"`
}

// RosterOutcome is how far a push's roster message went: to how many
// nodes, which hold it (by their heartbeats) when the wait ended, which
// are heard and do not hold it yet, and which are silent (never heard, or
// not within their silence rule): not waited for.
type RosterOutcome struct {
	spec.PushRoster
	Held   int      `json:"held"`
	NotYet []string `json:"not_yet"`
	Silent []string `json:"silent"`
}

func pushCommand() *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "compose, sign and send each node's declaration, and wait for their reports",
		ArgsUsage: "[NODE...]",
		Description: `Sends every named node (every node when none is named) the declaration of
the modules assigned to it, numbered and signed. Each host verifies it,
changes only what differs, removes what is no longer declared, and reports;
each report is printed as it arrives. The wait is bounded: when it ends,
every node that did not answer is named.

Exit status: 0 when every node applied everything; 1 when a node was not
sent, refused, failed a resource, did not answer in time, or was heard and
did not take the names in time, or when the connection to the controller
was lost during the wait: that is said at once, with the nodes sent to and
not heard from, and what to run once the controller is back.

The mesh's names (the roster: every node and route) go first, to every
node whether named or not, as one signed message, and only when they
changed; a declaration names the roster it was composed with. When a push
sends the names, it says so ("names: roster N sent to every host") and,
after the reports, how many nodes hold them, naming those that do not yet
and those that are silent. A node whose last declaration already holds what
would be sent (the same resources) is sent nothing: its line says
"unchanged, not sent", unless its last apply failed: then it is sent its
declaration again. --force sends it a new declaration anyway (a host whose
state was lost; it asks for the roster).

With --dry-run each node works out what it would change and answers, and
nothing anywhere changes: lines read + created, ~ changed, - removed.

Examples:
   mesh push --dry-run
   mesh push
   mesh push --wait 2m alpha beta
   mesh push --force gamma
   mesh push --json alpha | jq '.nodes[].report.results'`,
		Flags: []cli.Flag{
			dirFlag(), jsonFlag(),
			&cli.DurationFlag{Name: "wait", Value: 30 * time.Second, Usage: "how long to wait for the nodes' reports"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "list unchanged resources too"},
			&cli.BoolFlag{Name: "dry-run", Usage: "ask each node what it would change; nothing is stored, sent to apply, or changed"},
			&cli.BoolFlag{Name: "force", Usage: "send a new declaration even to a node whose last one holds the same content"},
		},
		Action: func(c *cli.Context) error {
			for _, n := range c.Args().Slice() {
				if err := spec.CheckName("node", n); err != nil {
					return usageError{err.Error()}
				}
			}
			if c.Duration("wait") < 0 {
				return usagef("--wait %s: a wait is 0 or more; nothing was sent", c.Duration("wait"))
			}
			op, err := dialOperator(c)
			if err != nil {
				return err
			}
			defer op.Close()
			progress := spec.OperatorInbox + ".push." + nats.NewInbox()[len("_INBOX."):]
			events := make(chan *nats.Msg, 256)
			sub, err := op.nc.ChanSubscribe(progress, events)
			if err != nil {
				return fmt.Errorf("listen for the push's progress: %w", err)
			}
			defer sub.Unsubscribe()
			if err := op.nc.Flush(); err != nil {
				return fmt.Errorf("listen for the push's progress: %w", err)
			}
			res, err := call(op, spec.Push, spec.PushRequest{Nodes: c.Args().Slice(), Progress: progress, DryRun: c.Bool("dry-run"), Force: c.Bool("force")})
			if err != nil {
				return err
			}
			out := io.Discard
			if !c.Bool("json") {
				out = c.App.Writer
			}
			deadline := time.Now().Add(c.Duration("wait"))
			if res.Roster != nil {
				say(out, "names: roster %d sent to every host (%s)\n", res.Roster.Seq, nodeCount(res.Roster.Nodes))
			}
			outcome := waitForReports(c.Context, out, res, events, op.lost, c.Duration("wait"), c.Bool("verbose"), c.Bool("dry-run"))
			if res.Roster != nil && outcome.Lost == "" {
				// A host heard that did not take the names within the wait
				// fails the push; a silent one is mesh status's to report.
				var err error
				if outcome.Roster, err = waitForRoster(c.Context, out, op, *res.Roster, deadline); err != nil || len(outcome.Roster.NotYet) > 0 {
					outcome.OK = false
				}
			}
			if c.Bool("json") {
				if err := printJSON(c.App.Writer, outcome); err != nil {
					return err
				}
			}
			if outcome.Lost != "" {
				return fmt.Errorf("push %s did not complete: %s", res.ID, outcome.Lost)
			}
			if !outcome.OK {
				if c.Bool("dry-run") {
					return fmt.Errorf("dry run %s: not every node answered, or a change would fail", res.ID)
				}
				return fmt.Errorf("push %s did not complete everywhere", res.ID)
			}
			return nil
		},
	}
}

// waitForReports prints each node's report as it arrives, until every sent
// node answered or wait passed, then names the silent. A connection to the
// controller lost (lost, nil for none) ends the wait at once: no report
// can arrive after it.
func waitForReports(ctx context.Context, w io.Writer, res spec.PushResult, events <-chan *nats.Msg, lost *loss, wait time.Duration, verbose, dryRun bool) PushOutcome {
	var lostC <-chan struct{}
	if lost != nil {
		lostC = lost.Done()
	}
	outcome, pending := sentLines(w, res, dryRun)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	// take prints the report m carries, if it is one this push waits for.
	take := func(m *nats.Msg) {
		var ev spec.PushEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.PushID != res.ID {
			return
		}
		i, ok := pending[ev.Report.Node]
		if !ok {
			return
		}
		r := ev.Report
		if r.Waiting != "" {
			// Not applied yet (the host waits for the roster the
			// declaration names): said, and waited for.
			outcome.Nodes[i].Report = &r
			say(w, "%s: declaration %d waits: %s\n", r.Node, r.Seq, r.Waiting)
			return
		}
		delete(pending, ev.Report.Node)
		outcome.Nodes[i].Report, outcome.Nodes[i].Answered = &r, true
		if !printReport(w, r, verbose) {
			outcome.OK = false
		}
	}
	for len(pending) > 0 {
		select {
		case m := <-events:
			take(m)
		case <-lostC:
			// The reports that arrived before the loss are the push's.
			for drained := false; !drained; {
				select {
				case m := <-events:
					take(m)
				default:
					drained = true
				}
			}
			if len(pending) == 0 {
				return outcome
			}
			lostWait(w, &outcome, lost, pending)
			return outcome
		case <-ctx.Done():
			for node := range pending {
				outcome.Silent = append(outcome.Silent, node)
			}
			sort.Strings(outcome.Silent)
			say(w, "interrupted; not heard yet from: %s\n", strings.Join(outcome.Silent, ", "))
			outcome.OK = false
			return outcome
		case <-deadline.C:
			timedOut(w, &outcome, pending, wait)
			return outcome
		}
	}
	return outcome
}

// sentLines prints a line for each node the push named (sent, unchanged,
// held, not sent) and returns the outcome so far and the nodes whose
// report is waited for, by their index in it.
func sentLines(w io.Writer, res spec.PushResult, dryRun bool) (PushOutcome, map[string]int) {
	outcome := PushOutcome{ID: res.ID, OK: true, Silent: []string{}}
	pending := map[string]int{}
	for _, n := range res.Nodes {
		outcome.Nodes = append(outcome.Nodes, PushNodeOutcome{PushNode: n})
		switch {
		case n.Held:
			say(w, "%s: held: %s\n", n.Node, n.Error)
			outcome.OK = false
			continue
		case n.Error != "":
			say(w, "%s: not sent: %s\n", n.Node, n.Error)
			outcome.OK = false
			continue
		case n.Unchanged:
			say(w, "%s: unchanged, not sent (declaration %d holds it; --force sends anyway)\n", n.Node, n.Seq)
			continue
		}
		if dryRun {
			say(w, "%s: asked what declaration %d would change (%d resources)\n", n.Node, n.Seq, n.Resources)
		} else {
			say(w, "%s: sent declaration %d (%d resources)\n", n.Node, n.Seq, n.Resources)
		}
		pending[n.Node] = len(outcome.Nodes) - 1
	}
	return outcome, pending
}

// timedOut says which nodes the push's wait ended without: silent, or
// heard waiting (for a roster).
func timedOut(w io.Writer, outcome *PushOutcome, pending map[string]int, wait time.Duration) {
	var silent, waiting []string
	for node, i := range pending {
		outcome.Silent = append(outcome.Silent, node)
		if outcome.Nodes[i].Report != nil {
			waiting = append(waiting, node)
		} else {
			silent = append(silent, node)
		}
	}
	sort.Strings(outcome.Silent)
	sort.Strings(silent)
	sort.Strings(waiting)
	if len(silent) > 0 {
		say(w, "no answer within %s from: %s\n", wait, strings.Join(silent, ", "))
	}
	if len(waiting) > 0 {
		say(w, "still waiting after %s (mesh status says for what): %s\n", wait, strings.Join(waiting, ", "))
	}
	outcome.OK = false
}

// lostWait says that the connection to the controller was lost while
// the nodes in pending were waited for: what is known of the push (whom
// it was sent to and not heard from, who answered) and what to run once
// the controller is back. Silent names the nodes waited for.
func lostWait(w io.Writer, outcome *PushOutcome, lost *loss, pending map[string]int) {
	outcome.Lost, outcome.OK = lost.String(), false
	var answered []string
	for _, n := range outcome.Nodes {
		if _, waited := pending[n.Node]; waited {
			outcome.Silent = append(outcome.Silent, n.Node)
		} else if n.Answered {
			answered = append(answered, n.Node)
		}
	}
	sort.Strings(outcome.Silent)
	sort.Strings(answered)
	say(w, "%s: no report can reach this push any more\n", outcome.Lost)
	say(w, "  sent before the loss, no report of its apply from: %s\n", strings.Join(outcome.Silent, ", "))
	if len(answered) > 0 {
		say(w, "  answered before the loss: %s\n", strings.Join(answered, ", "))
	}
	say(w, "once the controller runs again, mesh status says whether they applied it, and mesh push %s sends it again if not\n", strings.Join(outcome.Silent, " "))
}

// rosterPoll is how often a push asks whether the hosts hold its roster:
// each ask lists every node, which on a large fleet is pages of them.
const rosterPoll = time.Second

// waitForRoster waits until every node heard holds roster r (its
// heartbeat names a roster at or above it), or deadline passes, then says
// how many hold it and names the others. A silent node is named, not
// waited for: mesh status says it is silent.
func waitForRoster(ctx context.Context, w io.Writer, op *Operator, r spec.PushRoster, deadline time.Time) (*RosterOutcome, error) {
	out := &RosterOutcome{PushRoster: r}
	tick := time.NewTicker(rosterPoll)
	defer tick.Stop()
	var err error
	for {
		var nodes []spec.Node
		if nodes, err = allNodes(op); err == nil {
			*out = rosterHeld(r, nodes, time.Now())
			if len(out.NotYet) == 0 {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	if err != nil {
		say(w, "names: which hosts hold roster %d is not known: %v\n", r.Seq, err)
		return out, fmt.Errorf("read which hosts hold roster %d: %w", r.Seq, err)
	}
	line := fmt.Sprintf("names: roster %d held by %d of %s", r.Seq, out.Held, nodeCount(out.Held+len(out.NotYet)+len(out.Silent)))
	if len(out.NotYet) > 0 {
		line += "; not yet: " + strings.Join(out.NotYet, ", ")
	}
	if len(out.Silent) > 0 {
		line += "; silent: " + strings.Join(out.Silent, ", ")
	}
	say(w, "%s\n", line)
	return out, nil
}

// nodeCount is n nodes, in words.
func nodeCount(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// rosterHeld sorts nodes by whether they hold roster r at now.
func rosterHeld(r spec.PushRoster, nodes []spec.Node, now time.Time) RosterOutcome {
	out := RosterOutcome{PushRoster: r, NotYet: []string{}, Silent: []string{}}
	for _, n := range nodes {
		switch {
		case n.RosterSeq >= r.Seq:
			out.Held++
		case n.LastHeard == nil || now.Sub(*n.LastHeard) > time.Duration(n.SilentAfterMS)*time.Millisecond:
			out.Silent = append(out.Silent, n.Name)
		default:
			out.NotYet = append(out.NotYet, n.Name)
		}
	}
	sort.Strings(out.NotYet)
	sort.Strings(out.Silent)
	return out
}
