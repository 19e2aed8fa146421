package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func moduleCommand() *cli.Command {
	return &cli.Command{
		Name:  "module",
		Usage: "register, list and show modules",
		Subcommands: []*cli.Command{
			{
				Name:      "register",
				Usage:     "register a module (a directory with module.json) or every module of a catalogue",
				ArgsUsage: "PATH...",
				Description: `Each PATH is a module's directory (holding module.json), a module.json file,
or a catalogue: a directory whose subdirectories are modules. Every manifest
is read and checked first; if any is bad, nothing is registered. Registering
a module again replaces its earlier version. docs/modules.md describes the
manifest. A container's image archive must be there when it is registered:
make example-images builds those of examples/web and examples/client.

Example:
   mesh module register examples/motd
   mesh module register examples/motd examples/webroot
   mesh module register examples`,
				Flags: []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return usagef("give the path of a module or a catalogue (mesh module register examples/motd)")
					}
					mods, contents, err := readModules(c.Args().Slice()...)
					if err != nil {
						return err
					}
					op, err := dialOperator(c)
					if err != nil {
						return err
					}
					defer op.Close()
					for _, m := range mods {
						if err := uploadBlobs(op, m, contents); err != nil {
							return err
						}
					}
					res, err := call(op, spec.ModuleRegister, spec.ModuleRegisterRequest{Modules: mods})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res.Modules)
					}
					for _, m := range res.Modules {
						if m.Previous != "" {
							say(c.App.Writer, "registered %s %s (%d resources), replacing %s\n", m.Name, m.Version, m.Resources, m.Previous)
						} else {
							say(c.App.Writer, "registered %s %s (%d resources)\n", m.Name, m.Version, m.Resources)
						}
					}
					return nil
				},
			},
			{
				Name:        "list",
				Usage:       "list the registered modules and the nodes they are assigned to",
				Description: "Example:\n   mesh module list --json",
				Flags:       []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 0, "no arguments"); err != nil {
						return err
					}
					res, err := callCmd(c, spec.ModuleList, spec.ModuleListRequest{})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res.Modules)
					}
					return printModules(c.App.Writer, res)
				},
			},
			{
				Name:        "show",
				Usage:       "show one module: its resources and where it is assigned",
				ArgsUsage:   "NAME",
				Description: "Example:\n   mesh module show motd",
				Flags:       []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the module's name"); err != nil {
						return err
					}
					res, err := callCmd(c, spec.ModuleShow, spec.ModuleShowRequest{Name: c.Args().First()})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res)
					}
					return printModule(c.App.Writer, res)
				},
			},
			{
				Name:      "remove",
				Usage:     "remove a module from the catalogue (refused while it is assigned)",
				ArgsUsage: "NAME",
				Description: `Removes the module from the catalogue. A module still assigned to a node is
refused, naming the nodes, and nothing changes: unassign it and push first.
The content its files named stays stored (another module may name it too).

Example:
   mesh unassign motd alpha && mesh push alpha && mesh module remove motd`,
				Flags: []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the module's name"); err != nil {
						return err
					}
					if err := spec.CheckName("module", c.Args().First()); err != nil {
						return usageError{err.Error()}
					}
					res, err := callCmd(c, spec.ModuleRemove, spec.ModuleRemoveRequest{Name: c.Args().First()})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res)
					}
					say(c.App.Writer, "removed module %s %s\n", res.Name, res.Version)
					return nil
				},
			},
		},
	}
}

// blobSource is where the content of a blob was read: a source in a
// module's directory.
type blobSource struct{ dir, source string }

// readModules reads and checks every manifest under paths, resolving
// sources; any bad one fails the whole read, naming the file and field. It
// also returns where each source was read, by digest, for the blob uploads.
func readModules(paths ...string) ([]spec.Module, map[string]blobSource, error) {
	var manifests []string
	for _, path := range paths {
		found, err := manifestsOf(path)
		if err != nil {
			return nil, nil, err
		}
		manifests = append(manifests, found...)
	}
	var mods []spec.Module
	contents := map[string]blobSource{}
	names := map[string]string{}
	for _, mf := range manifests {
		body, err := os.ReadFile(mf)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", mf, err)
		}
		man, err := spec.ParseManifest(body)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w; nothing was registered", mf, err)
		}
		dir := filepath.Dir(mf)
		mod, err := man.Resolve(func(source string) (spec.Content, error) {
			c, err := readSource(dir, source)
			if err == nil {
				contents[c.Digest] = blobSource{dir: dir, source: source}
			}
			return c, err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w; nothing was registered", mf, err)
		}
		if prev, dup := names[mod.Name]; dup {
			return nil, nil, fmt.Errorf("%s and %s both name module %q; nothing was registered", prev, mf, mod.Name)
		}
		names[mod.Name] = mf
		mods = append(mods, mod)
	}
	return mods, contents, nil
}

// manifestsOf is the manifest at path: the file itself, the module.json of
// a module's directory, or those of a catalogue's subdirectories.
func manifestsOf(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	if _, err := os.Stat(filepath.Join(path, spec.ManifestFile)); err == nil {
		return []string{filepath.Join(path, spec.ManifestFile)}, nil
	}
	found, _ := filepath.Glob(filepath.Join(path, "*", spec.ManifestFile))
	if len(found) == 0 {
		return nil, fmt.Errorf("%s holds no %s, and no subdirectory does: give a module's directory or a catalogue", path, spec.ManifestFile)
	}
	sort.Strings(found)
	return found, nil
}

// uploadBlobs sends every content of m that travels as a blob (large files
// and image archives), read again from its source a chunk at a time.
func uploadBlobs(op *Operator, m spec.Module, sources map[string]blobSource) error {
	blobs := m.Blobs()
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, digest := range digests {
		src, ok := sources[digest]
		if !ok {
			return fmt.Errorf("module %s: the content of blob %s was not read", m.Name, digest)
		}
		f, size, err := openSource(src.dir, src.source)
		if err != nil {
			return fmt.Errorf("module %s: %w", m.Name, err)
		}
		if size != blobs[digest] {
			f.Close()
			return fmt.Errorf("module %s: %s changed since it was read (%d bytes, now %d): run the command again once it is written",
				m.Name, filepath.Join(src.dir, src.source), blobs[digest], size)
		}
		err = uploadBlob(op, digest, size, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("module %s: %w", m.Name, err)
		}
	}
	return nil
}

// uploadBlob sends the size bytes r holds as the blob digest, in chunks;
// the controller stops it early when it holds the blob already.
func uploadBlob(op *Operator, digest string, size int64, r io.ReaderAt) error {
	buf := make([]byte, spec.BlobChunk)
	for off := int64(0); off < size; off += spec.BlobChunk {
		n, err := r.ReadAt(buf[:min(spec.BlobChunk, size-off)], off)
		if err != nil && !(errors.Is(err, io.EOF) && int64(n) == min(spec.BlobChunk, size-off)) {
			return fmt.Errorf("read blob %s at %d: %w", digest, off, err)
		}
		res, err := call(op, spec.BlobPut, spec.BlobPutRequest{Digest: digest, Size: size, Offset: off, Data: buf[:n]})
		if err != nil {
			return fmt.Errorf("upload blob %s: %w", digest, err)
		}
		if res.Complete {
			return nil
		}
	}
	return nil
}

func printModules(w io.Writer, res spec.ModuleListResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODULE\tVERSION\tRESOURCES\tNODES\tREGISTERED")
	for _, m := range res.Modules {
		say(tw, "%s\t%s\t%d\t%s\t%s\n", m.Name, m.Version, m.Resources, orDash(strings.Join(m.Nodes, ",")), m.Registered.Format(time.RFC3339))
	}
	return tw.Flush()
}

func printModule(w io.Writer, res spec.ModuleShowResult) error {
	say(w, "module    %s %s\n", res.Info.Name, res.Info.Version)
	if res.Info.Description != "" {
		say(w, "about     %s\n", res.Info.Description)
	}
	say(w, "assigned  %s\n", orDash(strings.Join(res.Info.Nodes, ", ")))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tPATH\tMODE\tOWNER\tCONTENT")
	for _, r := range res.Module.Resources {
		if r.Spec == nil {
			continue
		}
		row := r.Spec.Row()
		say(tw, "%s\t%s\t%s\t%s\t%s\n", r.Kind, row.Target, row.Mode, row.Owner, row.Content)
	}
	return tw.Flush()
}
