package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"text/tabwriter"

	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

// Version is what mesh version says of the running binary.
type Version struct {
	// Version is the module's version as the build recorded it: a tag
	// for go install module@version, "(devel)" for a build from a
	// checkout.
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"` // the checkout's revision, if recorded
	Modified bool   `json:"modified"`         // the checkout had changes not committed
	// SHA256 is the hex digest of the running executable: what a host
	// sends as its host_version, and what names a delivered binary.
	SHA256   string `json:"sha256"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Protocol int    `json:"protocol"` // the protocol this binary speaks (spec.Protocol)
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the binary's SHA-256, the Go version and the protocol",
		Description: `The SHA-256 is that of the running executable: the host version a node
reports (mesh node list shows its first 12 digits).

Example:
   mesh version
   mesh --version
   mesh version --json | jq -r .sha256`,
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			return printVersion(c.App.Writer, c.Bool("json"))
		},
	}
}

// versionFlag is mesh --version, which is mesh version.
func versionFlag() cli.Flag {
	return &cli.BoolFlag{Name: "version", Usage: "print the version (mesh version)"}
}

// printVersion prints the running binary's version, as a table or JSON.
func printVersion(w io.Writer, asJSON bool) error {
	v, err := runningVersion()
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	version := v.Version
	if v.Commit != "" {
		version += " " + v.Commit
		if v.Modified {
			version += " (modified)"
		}
	}
	fmt.Fprintf(tw, "version\t%s\n", version)
	fmt.Fprintf(tw, "sha256\t%s\n", v.SHA256)
	fmt.Fprintf(tw, "go\t%s %s/%s\n", v.Go, v.OS, v.Arch)
	fmt.Fprintf(tw, "protocol\t%d\n", v.Protocol)
	return tw.Flush()
}

// runningVersion reads the running binary's build information and digest.
func runningVersion() (Version, error) {
	v := Version{Version: "(unknown)", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, Protocol: spec.Protocol}
	if info, ok := debug.ReadBuildInfo(); ok {
		v.Version = info.Main.Version
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	digest, err := release.Digest("")
	if err != nil {
		return v, err
	}
	v.SHA256 = digest
	return v, nil
}
