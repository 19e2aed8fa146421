package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// mesh backup and mesh restore run on the controller's machine against
// its state directory, as genesis does, not over the bus: the work is
// daemon's (the CLI never opens the store).

func passphraseFileFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "passphrase-file", Usage: usage}
}

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:      "backup",
		Usage:     "write the controller's store and keys to one file, sealed with a passphrase",
		ArgsUsage: "FILE",
		Description: `Writes FILE (0600): a consistent copy of the controller's store, taken while
it runs, every key of the mesh (the signing key, the at-rest key that
seals secret settings, the CA, the operator's and this node's
credentials), the addresses it binds and D/config.yaml, the whole sealed
with a passphrase of at least 12 characters (age, scrypt). The passphrase
is asked on the terminal, twice, without echo, or read from
--passphrase-file (its first line). Keep it apart from the file: with
both, anyone holds the mesh.

The declaration stream is not in it: mesh restore makes a controller whose
hosts take what it sends. Run it on the controller's machine.

Example:
   mesh backup --dir /var/lib/mesh /root/home-$(date +%F).backup`,
		Flags: []cli.Flag{
			dirFlag(),
			passphraseFileFlag("read the passphrase from this file's first line (default: ask on the terminal)"),
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, "FILE, where the backup is written"); err != nil {
				return err
			}
			if err := absDir(c); err != nil {
				return err
			}
			file := c.Args().First()
			pass, err := passphrase(c, true)
			if err != nil {
				return err
			}
			v, err := runningVersion()
			if err != nil {
				return err
			}
			h, err := daemon.WriteBackup(c.Context, daemon.Backup{Dir: c.String("dir"), File: file, Passphrase: pass,
				Binary: v.Version + " sha256:" + v.SHA256, Now: time.Now()})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "backup of mesh %s written to %s (%d files); restore it with mesh restore --dir DIR %s\n", h.Mesh, file, len(h.Files), file)
			return nil
		},
	}
}

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "make a controller's state directory from a backup, on this machine",
		ArgsUsage: "FILE",
		Description: `Writes the mesh that mesh backup sealed in FILE into --dir, which must be
empty or new (one that holds anything is refused, and left as it was);
a wrong passphrase writes nothing. Then mesh controller --dir D runs it
with the flags and the addresses kept in the backup: give this machine
the old controller's address, so the hosts find the bus again.

Every sequence the restored store sends is raised far above the last it
recorded, so a host that applied declarations pushed after the backup
takes the next one. The hosts converge on what the backup holds: pushes
made after it are gone from the store, and a node sent nothing before the
backup is numbered past what its host reports.

Example:
   mesh restore --dir /var/lib/mesh --passphrase-file /root/pass home-2026-01-02.backup
   mesh controller --dir /var/lib/mesh`,
		Flags: []cli.Flag{
			dirFlag(),
			passphraseFileFlag("read the passphrase from this file's first line (default: ask on the terminal)"),
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, "FILE, the backup"); err != nil {
				return err
			}
			if err := absDir(c); err != nil {
				return err
			}
			dir, file := c.String("dir"), c.Args().First()
			if _, err := os.Stat(file); err != nil {
				return fmt.Errorf("read backup: %w", err)
			}
			pass, err := passphrase(c, false)
			if err != nil {
				return err
			}
			h, err := daemon.RestoreBackup(c.Context, daemon.Restore{File: file, Dir: dir, Passphrase: pass, Now: time.Now()})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "mesh %s restored into %s from the backup of %s (written by %s); run it with mesh controller --dir %s\n",
				h.Mesh, dir, h.Created.Format(time.RFC3339), h.Binary, dir)
			return nil
		},
	}
}

// passphrase is --passphrase-file's first line, or what is typed on the
// terminal without echo (twice when confirm); never an argument. A short
// one is refused before any work.
func passphrase(c *cli.Context, confirm bool) (string, error) {
	if f := c.String("passphrase-file"); f != "" {
		body, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("read the passphrase: %w", err)
		}
		line, _, _ := strings.Cut(string(body), "\n")
		p := strings.TrimSuffix(line, "\r")
		if err := daemon.CheckPassphrase(p); err != nil {
			return "", usagef("--passphrase-file %s: %v", filepath.Base(f), err)
		}
		return p, nil
	}
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", usagef("no terminal to ask the passphrase on: give --passphrase-file F")
	}
	p, err := askPassphrase(c.App.ErrWriter, fd, "passphrase: ")
	if err != nil {
		return "", err
	}
	if err := daemon.CheckPassphrase(p); err != nil {
		return "", usagef("%v", err)
	}
	if confirm {
		again, err := askPassphrase(c.App.ErrWriter, fd, "again: ")
		if err != nil {
			return "", err
		}
		if again != p {
			return "", errors.New("the passphrases typed differ: nothing was written")
		}
	}
	return p, nil
}

// askPassphrase prompts on w and reads a line from the terminal fd
// without echo.
func askPassphrase(w io.Writer, fd int, prompt string) (string, error) {
	fmt.Fprint(w, prompt)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(w)
	if err != nil {
		return "", fmt.Errorf("read the passphrase: %w", err)
	}
	return string(b), nil
}
