package cli

// What the commands print: tables for people, JSON with --json. The
// golden test (output_test.go) holds these for fixed answers.

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

func heard(n spec.Node) string {
	if n.LastHeard == nil {
		return "never"
	}
	return n.HeardAgo + " ago"
}

// every is how often a node said it sends a heartbeat, or "-" if it did
// not say (never heard, or a heartbeat without its interval).
func every(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// heartbeatRow is how often a heard node sends a heartbeat, and when it is
// silent.
func heartbeatRow(n spec.Node) string {
	silent := (time.Duration(n.SilentAfterMS) * time.Millisecond).String()
	if n.HeartbeatMS <= 0 {
		return "not said; silent after " + silent + " unheard"
	}
	return "every " + every(n.HeartbeatMS) + "; silent after " + silent + " unheard (two missed)"
}

func shortVersion(v string) string {
	if v == "" {
		return "-"
	}
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

// protocol is n's protocol as node show says it: a refused one with why
// and what to do.
func protocol(n spec.Node) string {
	if n.LastHeard != nil && !n.ProtocolKnown {
		return fmt.Sprintf("%d (refused: this controller speaks %d; upgrade the host with `mesh release roll`)", n.Protocol, spec.Protocol)
	}
	return protocolCell(n)
}

// protocolCell is n's protocol in node list's column, kept narrow: node
// show and status say what to do about a refused one.
func protocolCell(n spec.Node) string {
	switch {
	case n.LastHeard == nil:
		return "-"
	case n.ProtocolKnown:
		return strconv.Itoa(n.Protocol)
	default:
		return fmt.Sprintf("%d (refused)", n.Protocol)
	}
}

func printNodeList(w io.Writer, nodes []spec.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tHEARD\tEVERY\tVERSION\tPROTOCOL\tARCH\tOS")
	for _, n := range nodes {
		arch, osName := "-", "-"
		if n.Facts != nil {
			arch, osName = n.Facts.Arch, n.Facts.Distro+" "+n.Facts.DistroVer
		}
		say(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Address, heard(n), every(n.HeartbeatMS), shortVersion(n.HostVersion), protocolCell(n), arch, strings.TrimSpace(osName))
	}
	return tw.Flush()
}

func printNode(w io.Writer, n spec.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { say(tw, "%s\t%s\n", k, v) }
	row("node", n.Name)
	row("address", n.Address)
	row("joined", n.Joined.Format(time.RFC3339))
	row("sealing key", orDash(n.SealKey))
	if n.LastHeard == nil {
		row("heard", "never: this node has not sent a heartbeat")
	} else {
		row("heard", fmt.Sprintf("%s (%s)", heard(n), n.LastHeard.Format(time.RFC3339)))
		row("heartbeat", heartbeatRow(n))
	}
	row("host version", orDash(n.HostVersion))
	row("protocol", protocol(n))
	row("sent sequence", strconv.FormatUint(n.SentSeq, 10))
	row("applied sequence", strconv.FormatUint(n.AppliedSeq, 10))
	if n.RosterSeq > 0 {
		row("roster held", strconv.FormatUint(n.RosterSeq, 10))
	}
	if r := n.LastReport; r == nil {
		row("last report", "none")
	} else {
		row("last report", reportSummary(*r))
		for _, res := range r.Results {
			switch {
			case res.Outcome == spec.Failed:
				row("  failed", res.Name+": "+res.Error)
			case res.Note != "":
				row("  "+res.Outcome, res.Name+": "+res.Note)
			}
		}
		if r.Omitted > 0 {
			row("  not kept", fmt.Sprintf("%d more result(s): the node sent a report larger than the controller keeps", r.Omitted))
		}
	}
	if f := n.Facts; f == nil {
		row("facts", "none reported yet")
	} else {
		row("facts reported", f.Time.Format(time.RFC3339))
		row("hostname", orDash(f.Hostname))
		row("architecture", orDash(f.Arch))
		row("os", orDash(f.OS))
		row("kernel", orDash(f.Kernel))
		row("distribution", orDash(strings.TrimSpace(f.Distro+" "+f.DistroVer)))
		row("cpu", orDash(f.CPUModel))
		row("cores", strconv.Itoa(f.Cores))
		row("memory", bytesIEC(f.MemoryBytes))
		row("disk", fmt.Sprintf("%s (%s free)", bytesIEC(f.DiskBytes), bytesIEC(f.DiskFree)))
		row("machine", orDash(f.Virtual))
		row("uptime", (time.Duration(f.UptimeSecond) * time.Second).String())
		row("capabilities", orDash(strings.Join(f.Capabilities, ", ")))
		trust := "the mesh root is not installed"
		if f.TrustInstalled != "" {
			trust = "the mesh root is installed: " + f.TrustInstalled
		}
		row("trust store", trust)
		chain := "no CA chain received yet"
		if f.Intermediate != "" {
			chain = "holds intermediate " + f.Intermediate
		}
		row("ca chain", chain)
		for _, c := range f.Certificates {
			row("certificate", fmt.Sprintf("%s in %s: serial %s, valid until %s", c.Name, c.Path, c.Serial, c.NotAfter.UTC().Format(time.RFC3339)))
		}
		if f.Engine != "" {
			row("container engine", f.Engine)
			row("container subnet", orDash(f.Subnet))
		}
		for _, e := range f.Errors {
			row("unreadable", e)
		}
	}
	if o := n.Overlay; o != nil {
		overlayRows(row, *o, time.Now())
	}
	return tw.Flush()
}

// reportSummary is a report in one line.
func reportSummary(r spec.Report) string {
	when := r.Time.Format(time.RFC3339)
	if r.Refused != "" {
		return fmt.Sprintf("refused declaration %d at %s: %s", r.Seq, when, r.Refused)
	}
	if r.Waiting != "" {
		return fmt.Sprintf("declaration %d not applied yet at %s: %s", r.Seq, when, r.Waiting)
	}
	if r.Unkept != "" {
		return fmt.Sprintf("could not keep declaration %d at %s: %s", r.Seq, when, r.Unkept)
	}
	counts := map[string]int{}
	for _, res := range r.Results {
		counts[res.Outcome]++
	}
	kind := "applied"
	if r.Reconcile {
		kind = "reconcile corrected"
	}
	return fmt.Sprintf("%s declaration %d at %s: %d created, %d changed, %d removed, %d unchanged, %d failed, %d writes",
		kind, r.Seq, when, counts[spec.Created], counts[spec.Changed], counts[spec.Removed], counts[spec.Unchanged], counts[spec.Failed], r.Writes)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func printStatus(w io.Writer, res spec.StatusResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHEARD\tEVERY\tSENT\tAPPLIED\tSTATE\tPENDING\tFAILED\tHOLD\tVERSION\tPROTOCOL")
	for _, n := range res.Nodes {
		pending := "no"
		if n.Pending {
			pending = "yes"
			if n.PendingWhy != "" {
				pending = "does not compose"
			}
		}
		hold := "-"
		if n.Held {
			hold = "held"
		}
		proto := "-"
		if n.LastHeard != nil {
			proto = strconv.Itoa(n.Protocol)
			if !n.ProtocolKnown {
				proto += " (refused)"
			}
		}
		heard := n.Heard
		if n.Silent {
			heard += " (silent)"
		}
		state := n.State
		if n.Refused != "" {
			state += ", refused"
		}
		say(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", n.Node, heard, every(n.HeartbeatMS), n.SentSeq, n.AppliedSeq, state, pending,
			len(n.Failures), hold, shortVersion(n.HostVersion), proto)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range res.Nodes {
		for _, f := range n.Failures {
			say(w, "  ! %s %s\n", n.Node, f)
		}
		for _, note := range n.Notes {
			say(w, "  ~ %s %s\n", n.Node, note)
		}
		if n.Intermediate != "" && n.Intermediate != res.Intermediate {
			say(w, "  ~ %s holds intermediate %s, the mesh signs with %s: pending until pushed\n", n.Node, n.Intermediate, res.Intermediate)
		}
		if n.Binary != "" && n.Binary != n.HostVersion {
			say(w, "  ~ %s is declared release %s and runs %s\n", n.Node, shortVersion(n.Binary), shortVersion(n.HostVersion))
		}
		for _, f := range n.Fallbacks {
			say(w, "  ~ %s's launcher fell back from %s at %s: %s\n", n.Node, shortVersion(f.Digest), f.At.UTC().Format(time.RFC3339), f.Reason)
		}
	}
	if r := res.Roll; r != nil {
		healthy := 0
		for _, n := range r.Nodes {
			if n.State == spec.RollHealthy {
				healthy++
			}
		}
		say(w, "roll %d of %s: %s, %d of %d node(s) healthy (mesh release roll --show)\n", r.ID, shortVersion(r.Digest), r.State, healthy, len(r.Nodes))
	}
	if len(res.Versions) > 1 {
		versions := make([]string, 0, len(res.Versions))
		for v := range res.Versions {
			versions = append(versions, v)
		}
		sort.Strings(versions)
		say(w, "host versions differ (%d): ", len(versions))
		var parts []string
		for _, v := range versions {
			parts = append(parts, shortVersion(v)+" on "+strings.Join(res.Versions[v], ", "))
		}
		say(w, "%s\n", strings.Join(parts, "; "))
	}
	if err := printPublic(w, res); err != nil {
		return err
	}
	if res.AllClear {
		say(w, "all clear: %d node(s) heard, current, nothing pending, no failure, no hold\n", len(res.Nodes))
		return nil
	}
	fmt.Fprintln(w, "not all clear:")
	for _, p := range res.Problems {
		say(w, "  - %s\n", p)
	}
	return nil
}

// printReport prints one node's report and says whether it was a success.
func printReport(w io.Writer, r spec.Report, verbose bool) bool {
	if r.Refused != "" {
		say(w, "%s: refused declaration %d: %s\n", r.Node, r.Seq, r.Refused)
		return false
	}
	if r.Unkept != "" {
		fmt.Fprintf(w, "%s: could not keep declaration %d: %s\n", r.Node, r.Seq, r.Unkept)
		return false
	}
	counts := map[string]int{}
	for _, res := range r.Results {
		counts[res.Outcome]++
	}
	if r.Preview {
		say(w, "%s: dry run of declaration %d: %d to create, %d to change, %d to remove, %d unchanged, %d would fail\n",
			r.Node, r.Seq, counts[spec.Created], counts[spec.Changed], counts[spec.Removed], counts[spec.Unchanged], counts[spec.Failed])
	} else {
		say(w, "%s: applied declaration %d: %d created, %d changed, %d removed, %d unchanged, %d failed (%d writes)\n",
			r.Node, r.Seq, counts[spec.Created], counts[spec.Changed], counts[spec.Removed], counts[spec.Unchanged], counts[spec.Failed], r.Writes)
	}
	for _, res := range r.Results {
		switch res.Outcome {
		case spec.Failed:
			say(w, "  ! %s: %s\n", res.Name, res.Error)
		case spec.Created:
			say(w, "  + %s\n", res.Name)
		case spec.Changed:
			if res.Note != "" {
				say(w, "  ~ %s (%s)\n", res.Name, res.Note)
			} else {
				say(w, "  ~ %s\n", res.Name)
			}
		case spec.Removed:
			if res.Note != "" {
				say(w, "  - %s (%s)\n", res.Name, res.Note)
			} else {
				say(w, "  - %s\n", res.Name)
			}
		case spec.Unchanged:
			if verbose {
				say(w, "  = %s\n", res.Name)
			}
		}
	}
	return counts[spec.Failed] == 0
}

// printAssigned says what was done and which nodes need a push for it: the
// ones whose declaration it changes, as the controller worked them out.
func printAssigned(w io.Writer, done string, res spec.AssignResult) {
	switch {
	case res.Unknown != "":
		say(w, "%s; which nodes it changes is not known (%s): mesh push sends every node its declaration\n", done, res.Unknown)
	case len(res.Changed) == 0 && res.Roster:
		say(w, "%s; it changes the names every node serves: mesh push sends them to all %d nodes, in one roster message\n", done, res.Nodes)
	case len(res.Changed) == 0:
		say(w, "%s; it changes no node's declaration: there is nothing to push\n", done)
	case res.Roster && len(res.Changed) < res.Nodes:
		say(w, "%s; it changes the names every node serves and the declaration of %s: mesh push %s sends both (the names to all %d nodes, in one roster message)\n",
			done, strings.Join(res.Changed, " "), strings.Join(res.Changed, " "), res.Nodes)
	case len(res.Changed) == res.Nodes && res.Nodes > 1:
		say(w, "%s; it changes the names every node serves: mesh push sends it to all %d nodes\n", done, res.Nodes)
	default:
		say(w, "%s; mesh push %s sends it\n", done, strings.Join(res.Changed, " "))
	}
}

func printDomainAdded(w io.Writer, domain string, res spec.CADomainAddResult) {
	say(w, "%s declared: intermediate %s now signs names under it\n", domain, res.Intermediate)
}

func printDomains(w io.Writer, res spec.CADomainListResult) error {
	if len(res.Domains) == 0 {
		fmt.Fprintln(w, "no public domain declared (mesh ca domain add DOMAIN)")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DOMAIN\tADDED\tSIGNED")
		for _, d := range res.Domains {
			signed := "yes"
			if !d.Signed {
				signed = "no: mesh ca domain add " + d.Name + " finishes its add"
			}
			say(tw, "%s\t%s\t%s\n", d.Name, d.Added.UTC().Format(time.RFC3339), signed)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(res.Permitted) == 0 {
		say(w, "intermediate %s is unconstrained (made before name constraints): mesh ca domain add gives the mesh a constrained one\n", res.Intermediate)
		return nil
	}
	say(w, "intermediate %s signs names under: %s\n", res.Intermediate, strings.Join(res.Permitted, ", "))
	return nil
}

func printCerts(w io.Writer, certs []spec.IssuedCert) error {
	if len(certs) == 0 {
		fmt.Fprintln(w, "no certificate issued yet")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAMES\tNOT AFTER\tSERIAL")
	for _, c := range certs {
		say(tw, "%s\t%s\t%s\t%s\n", c.Node, strings.Join(c.Names, ","), c.NotAfter.UTC().Format(time.RFC3339), c.Serial)
	}
	return tw.Flush()
}
