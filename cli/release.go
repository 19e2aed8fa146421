package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func releaseCommand() *cli.Command {
	return &cli.Command{
		Name:  "release",
		Usage: "publish mesh binaries for the fleet, and list them",
		Subcommands: []*cli.Command{{
			Name:      "publish",
			Usage:     "publish a mesh binary: stored by its SHA-256, with the target read from the file",
			ArgsUsage: "BINARY",
			Description: `Reads what the binary is built for from the file itself (the ELF header's
machine, the Go build information's GOOS, GOARCH and Go version), uploads
it to the controller in chunks, and records it as a release named by its
SHA-256: the version a host running it reports (mesh version says it of
this binary). The controller reads the target again from what it stored.
Refused, with nothing uploaded or recorded: a file that is not an ELF
executable, is truncated, is not a Go binary, is not mesh (its main
package must be github.com/mesh-fleet/mesh), is built for a target the
mesh does not run on (it runs on ` + strings.Join(release.Known(), ", ") + `), or is over 256 MiB.
Publishing a binary again changes nothing and says when it was.

Example:
   make build && mesh release publish bin/mesh
   GOARCH=arm64 CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o mesh-arm64 . && mesh release publish mesh-arm64`,
			Flags: []cli.Flag{dirFlag(), jsonFlag()},
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 1, "one argument, the binary's path"); err != nil {
					return err
				}
				path := c.Args().First()
				f, size, err := openRelease(path)
				if err != nil {
					return err
				}
				defer f.Close()
				t, err := release.Read(f, size)
				if release.IsRefusal(err) {
					return usagef("%s: %v; nothing was published", path, err)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				h := sha256.New()
				if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
					return fmt.Errorf("read %s: %w", path, err)
				}
				digest := hex.EncodeToString(h.Sum(nil))
				op, err := dialOperator(c)
				if err != nil {
					return err
				}
				defer op.Close()
				if err := uploadBlob(op, "sha256:"+digest, size, f); err != nil {
					return fmt.Errorf("upload %s (%s): %w", path, t, err)
				}
				res, err := call(op, spec.ReleasePublish, spec.ReleasePublishRequest{Digest: digest})
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, res)
				}
				printPublished(c.App.Writer, res)
				return nil
			},
		}, {
			Name:  "list",
			Usage: "list the published releases: digest, target, Go version, size, when",
			Description: `Every release, in the order published. A release is named by its digest,
the SHA-256 of the binary (64 hex digits, as mesh version and mesh node
list print a host's version); releases have no order beyond that.

Example:
   mesh release list --json | jq -r '.[] | select(.goarch == "arm64") | .digest'`,
			Flags: []cli.Flag{dirFlag(), jsonFlag()},
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 0, "no arguments"); err != nil {
					return err
				}
				rs, err := listReleases(c)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, rs)
				}
				return printReleases(c.App.Writer, rs)
			},
		}, rollCommand()},
	}
}

func rollCommand() *cli.Command {
	return &cli.Command{
		Name:      "roll",
		Usage:     "roll a published release over the nodes, one at a time, the controller's own last",
		ArgsUsage: "DIGEST",
		Description: `Declares the release DIGEST (mesh release list) as the binary of each node
named by --nodes (every node when none is), one node at a time: the node
is sent its declaration, and the next only once the node's heartbeats
report the digest, within --healthy-within. The controller's own node goes
last. A node whose launcher falls back from the release, or that does not
report it in time, halts the roll: its line names the node and the cause.
A node whose machine is of another architecture than the release is
skipped, saying why, and never sent it. A node that runs the digest
already is healthy at once, and is sent nothing when it holds it.

The roll runs in the controller: this command records it and follows it
until it is done or halts (exit 0 done, 1 halted or aborted); --detach
returns once it is recorded. A restarted controller goes on with it.

   --resume   runs the halted roll again from the node it halted at; a node
              whose launcher gave up on the release (it fell back from it)
              is asked to try it once more, once for each resume
   --abort    ends the running or halted roll: nodes not yet sent never are;
              a node sent it that did not report it healthy is declared
              (and sent) the binary it had before the roll again
   --show     prints the latest roll

Examples:
   mesh release roll 3f2a9c0d1e4b5a6978c0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6
   mesh release roll --nodes beta,gamma --healthy-within 2m DIGEST
   mesh release roll --resume
   mesh release roll --show --json | jq '.nodes[] | select(.state == "failed")'`,
		Flags: []cli.Flag{dirFlag(), jsonFlag(),
			&cli.StringFlag{Name: "nodes", Usage: "the nodes to roll, comma-separated, in this order (the controller's own last whatever the order)"},
			&cli.DurationFlag{Name: "healthy-within", Value: spec.DefaultHealthyWithin, Usage: "how long each node has to report the new digest"},
			&cli.BoolFlag{Name: "resume", Usage: "resume the halted roll"},
			&cli.BoolFlag{Name: "abort", Usage: "abort the running or halted roll"},
			&cli.BoolFlag{Name: "show", Usage: "print the latest roll"},
			&cli.BoolFlag{Name: "detach", Usage: "return once the roll is recorded, without following it"},
		},
		Action: rollAction,
	}
}

// rollArgs checks roll's flags and arguments (one mode at most; a digest
// and the roll's own flags only when it begins one) and returns the nodes
// --nodes names.
func rollArgs(c *cli.Context) ([]string, error) {
	var modes []string
	for _, m := range []string{"resume", "abort", "show"} {
		if c.Bool(m) {
			modes = append(modes, "--"+m)
		}
	}
	if len(modes) > 1 {
		return nil, usagef("%s: give one of them; nothing changed", strings.Join(modes, " and "))
	}
	var nodes []string
	if s := c.String("nodes"); s != "" {
		nodes = strings.Split(s, ",")
		for _, n := range nodes {
			if err := spec.CheckName("node", n); err != nil {
				return nil, usagef("--nodes: %v; nothing was rolled", err)
			}
		}
	}
	if len(modes) == 1 {
		if err := wantArgs(c, 0, "no arguments with "+modes[0]); err != nil {
			return nil, err
		}
		if nodes != nil || c.IsSet("healthy-within") {
			return nil, usagef("%s takes neither --nodes nor --healthy-within: they are the roll's, given when it began; nothing changed", modes[0])
		}
	} else {
		if err := wantArgs(c, 1, "one argument, the release's digest (mesh release list)"); err != nil {
			return nil, err
		}
		if err := spec.CheckReleaseDigest(c.Args().First()); err != nil {
			return nil, usagef("%v; nothing was rolled", err)
		}
		if w := c.Duration("healthy-within"); w < time.Second || w > spec.MaxHealthyWithin {
			return nil, usagef("--healthy-within %s is not between 1s and %s; nothing was rolled", w, spec.MaxHealthyWithin)
		}
	}
	return nodes, nil
}

// rollAction starts, resumes, aborts or shows a roll, and follows it.
func rollAction(c *cli.Context) error {
	nodes, err := rollArgs(c)
	if err != nil {
		return err
	}
	op, err := dialOperator(c)
	if err != nil {
		return err
	}
	var res spec.ReleaseRollResult
	switch {
	case c.Bool("show"):
		res, err = call(op, spec.RollShow, spec.ReleaseRollShowRequest{})
	case c.Bool("abort"):
		res, err = call(op, spec.RollAbort, spec.ReleaseRollAbortRequest{})
	case c.Bool("resume"):
		res, err = call(op, spec.RollResume, spec.ReleaseRollResumeRequest{})
	default:
		res, err = call(op, spec.ReleaseRoll, spec.ReleaseRollRequest{Digest: c.Args().First(), Nodes: nodes,
			HealthyWithinMS: c.Duration("healthy-within").Milliseconds()})
	}
	if err != nil {
		op.Close()
		return err
	}
	r := res.Roll
	if c.Bool("show") || c.Bool("abort") || c.Bool("detach") {
		defer op.Close()
		if c.Bool("json") && c.Bool("abort") {
			return printJSON(c.App.Writer, res)
		}
		if c.Bool("json") {
			return printJSON(c.App.Writer, r)
		}
		if c.Bool("abort") {
			printRollEnd(c.App.Writer, r)
			return printReverted(c.App.Writer, res.Reverted)
		}
		return printRoll(c.App.Writer, r)
	}
	if !c.Bool("json") {
		printRollStart(c.App.Writer, r, c.Bool("resume"))
	}
	prev := spec.Roll{}
	if c.Bool("resume") {
		prev = r // what was before is not news
	}
	f := &follower{c: c, op: op, grace: followGrace(r)}
	defer func() { f.op.Close() }()
	for {
		if !c.Bool("json") {
			printRollChanges(c.App.Writer, prev, r)
		}
		if r.Finished() {
			break
		}
		select {
		case <-c.Context.Done():
			return fmt.Errorf("stopped following roll %d, which goes on in the controller (mesh release roll --show): %w", r.ID, c.Context.Err())
		case <-time.After(250 * time.Millisecond):
		}
		now, err := f.show(r.ID)
		if err != nil {
			return fmt.Errorf("follow roll %d (it goes on in the controller: mesh release roll --show): %w", r.ID, err)
		}
		prev, r = r, now
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, r); err != nil {
			return err
		}
	} else {
		printRollEnd(c.App.Writer, r)
	}
	if r.State != spec.RollDone {
		return quietError{fmt.Sprintf("roll %d %s", r.ID, r.State)}
	}
	return nil
}

// follower asks for a roll as it moves. A controller that stops answering
// (its own node is rolled last, and its process restarts on the release)
// is dialled again until it answers, for up to grace.
type follower struct {
	c      *cli.Context
	op     *Operator
	grace  time.Duration
	since  time.Time // when the controller stopped answering; zero while it answers
	waited bool      // said so once
}

// followGrace is how long a follower waits for a controller that does not
// answer: the roll's deadline for one node, and a minute for the start.
func followGrace(r spec.Roll) time.Duration {
	return time.Duration(r.HealthyWithinMS)*time.Millisecond + time.Minute
}

// show is roll id as the controller has it now.
func (f *follower) show(id int64) (spec.Roll, error) {
	for {
		res, err := call(f.op, spec.RollShow, spec.ReleaseRollShowRequest{ID: id})
		var re *spec.ReplyError
		if err == nil || errors.As(err, &re) {
			f.since = time.Time{}
			return res.Roll, err
		}
		if f.since.IsZero() {
			f.since = time.Now()
		}
		if time.Since(f.since) > f.grace {
			return spec.Roll{}, fmt.Errorf("the controller has not answered for %s: %w", f.grace, err)
		}
		if !f.waited {
			f.waited = true
			say(f.c.App.ErrWriter, "mesh: the controller does not answer (%v): it may be starting the release; still following\n", err)
		}
		select {
		case <-f.c.Context.Done():
			return spec.Roll{}, f.c.Context.Err()
		case <-time.After(time.Second):
		}
		if op, err := dialOperator(f.c); err == nil {
			f.op.Close()
			f.op = op
		}
	}
}

// printRollStart says what roll r will do.
func printRollStart(w io.Writer, r spec.Roll, resumed bool) {
	var names []string
	for _, n := range r.Nodes {
		names = append(names, n.Node)
	}
	verb := "rolling"
	if resumed {
		verb = "resumed rolling"
	}
	say(w, "roll %d: %s %s over %s, one at a time, each given %s to report it\n",
		r.ID, verb, r.Digest, strings.Join(names, ", "), time.Duration(r.HealthyWithinMS)*time.Millisecond)
}

// printRollChanges prints each node whose state differs in r from prev,
// in roll order: one line each, as the roll moves.
func printRollChanges(w io.Writer, prev, r spec.Roll) {
	was := map[string]string{}
	for _, n := range prev.Nodes {
		was[n.Node] = n.State
	}
	for _, n := range r.Nodes {
		if was[n.Node] == n.State || n.State == spec.RollPending {
			continue
		}
		say(w, "  %s\n", rollNodeLine(n))
	}
}

// rollNodeLine is one node's line: its state, for how long, and why.
func rollNodeLine(n spec.RollNode) string {
	line := n.Node + ": " + n.State
	switch n.State {
	case spec.RollSending:
		line += ": sent the release, waiting for its heartbeats to report it"
	case spec.RollHealthy:
		if n.Started != nil && n.Ended != nil {
			line += fmt.Sprintf(": reports the release (%s after it was sent)", n.Ended.Sub(*n.Started).Round(100*time.Millisecond))
		} else {
			line += ": reports the release"
		}
	}
	if n.Cause != "" {
		line += ": " + n.Cause
	}
	return line
}

// printRollEnd says how roll r ended, or where it stands.
func printRollEnd(w io.Writer, r spec.Roll) {
	count := map[string]int{}
	for _, n := range r.Nodes {
		count[n.State]++
	}
	switch r.State {
	case spec.RollDone:
		say(w, "roll %d done: %d healthy on %s, %d skipped\n", r.ID, count[spec.RollHealthy], short(r.Digest), count[spec.RollSkipped])
	case spec.RollHalted:
		say(w, "roll %d halted: %s\n  %d healthy, %d not sent: mesh release roll --resume (once the cause is fixed), or --abort\n",
			r.ID, r.Cause, count[spec.RollHealthy], count[spec.RollPending])
	case spec.RollAborted:
		say(w, "roll %d aborted: %d healthy (they keep the release), %d never sent\n", r.ID, count[spec.RollHealthy], count[spec.RollPending])
	default:
		say(w, "roll %d %s\n", r.ID, r.State)
	}
}

// printReverted says, per node an abort declared its former binary again,
// what sending it came to; an error fails the command.
func printReverted(w io.Writer, reverted []spec.PushNode) error {
	failed := 0
	for _, pn := range reverted {
		switch {
		case pn.Error != "":
			failed++
			say(w, "  %s: declared the binary it had before the roll, not sent: %s\n", pn.Node, pn.Error)
		case pn.Unchanged:
			say(w, "  %s: declared the binary it had before the roll: holds it already (declaration %d)\n", pn.Node, pn.Seq)
		default:
			say(w, "  %s: declared the binary it had before the roll: sent declaration %d\n", pn.Node, pn.Seq)
		}
	}
	if failed > 0 {
		return quietError{fmt.Sprintf("%d node(s) not sent", failed)}
	}
	return nil
}

// printRoll prints roll r whole: what it rolls, and each node.
func printRoll(w io.Writer, r spec.Roll) error {
	say(w, "roll %d of %s: %s", r.ID, r.Digest, r.State)
	if r.Cause != "" {
		say(w, " (%s)", r.Cause)
	}
	say(w, "\nstarted %s, each node given %s\n", r.Started.UTC().Format(time.RFC3339), time.Duration(r.HealthyWithinMS)*time.Millisecond)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tSENT\tCAUSE")
	for _, n := range r.Nodes {
		sent := "-"
		if n.Started != nil {
			sent = n.Started.UTC().Format(time.RFC3339)
		}
		cause := n.Cause
		if cause == "" {
			cause = "-"
		}
		say(tw, "%s\t%s\t%s\t%s\n", n.Node, n.State, sent, cause)
	}
	return tw.Flush()
}

// short is a digest's first twelve digits.
func short(digest string) string { return digest[:min(12, len(digest))] }

// openRelease opens the regular file at path, refusing (exit 2) one that
// is not or is over spec.MaxRelease.
func openRelease(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, usagef("read %s: %v; nothing was published", path, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("read %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, 0, usagef("%s is not a file (%s); nothing was published", path, info.Mode().Type())
	}
	if info.Size() > spec.MaxRelease {
		f.Close()
		return nil, 0, usagef("%s: %d bytes, over the %d MiB a release may hold: it is not a mesh binary; nothing was published", path, info.Size(), spec.MaxRelease>>20)
	}
	return f, info.Size(), nil
}

// listReleases asks for every release, page by page.
func listReleases(c *cli.Context) ([]spec.Release, error) {
	op, err := dialOperator(c)
	if err != nil {
		return nil, err
	}
	defer op.Close()
	rs := []spec.Release{}
	req := spec.ReleaseListRequest{}
	for {
		res, err := call(op, spec.ReleaseList, req)
		if err != nil {
			return nil, err
		}
		rs = append(rs, res.Releases...)
		if res.Next <= req.After {
			return rs, nil
		}
		req.After = res.Next
	}
}

func printPublished(w io.Writer, res spec.ReleasePublishResult) {
	r := res.Release
	if res.Existed {
		say(w, "release %s (%s, %s, %s) was published at %s: nothing changed\n",
			r.Digest, r.Target(), r.Go, bytesIEC(uint64(r.Size)), r.Published.UTC().Format(time.RFC3339))
		return
	}
	say(w, "published release %s (%s, %s, %s)\n", r.Digest, r.Target(), r.Go, bytesIEC(uint64(r.Size)))
}

func printReleases(w io.Writer, rs []spec.Release) error {
	if len(rs) == 0 {
		fmt.Fprintln(w, "no release published yet: mesh release publish BINARY")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DIGEST\tTARGET\tGO\tSIZE\tPUBLISHED")
	for _, r := range rs {
		say(tw, "%s\t%s\t%s\t%s\t%s\n", r.Digest, r.Target(), r.Go, bytesIEC(uint64(r.Size)), r.Published.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}
