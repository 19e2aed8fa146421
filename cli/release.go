package cli

import (
	"crypto/sha256"
	"encoding/hex"
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
				var res spec.ReleasePublishResult
				if err := op.call(spec.VerbReleasePublish, spec.ReleasePublishRequest{Digest: digest}, &res); err != nil {
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
		}},
	}
}

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
		var res spec.ReleaseListResult
		if err := op.call(spec.VerbReleaseList, req, &res); err != nil {
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
		fmt.Fprintf(w, "release %s (%s, %s, %s) was published at %s: nothing changed\n",
			r.Digest, r.Target(), r.Go, bytesIEC(uint64(r.Size)), r.Published.UTC().Format(time.RFC3339))
		return
	}
	fmt.Fprintf(w, "published release %s (%s, %s, %s)\n", r.Digest, r.Target(), r.Go, bytesIEC(uint64(r.Size)))
}

func printReleases(w io.Writer, rs []spec.Release) error {
	if len(rs) == 0 {
		fmt.Fprintln(w, "no release published yet: mesh release publish BINARY")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DIGEST\tTARGET\tGO\tSIZE\tPUBLISHED")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Digest, r.Target(), r.Go, bytesIEC(uint64(r.Size)), r.Published.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}
