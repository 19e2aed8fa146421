// Command meshtls is the TLS half of the web and client examples, for
// images built FROM scratch: busybox httpd serves no TLS and busybox wget
// does not verify what it is served.
//
//	meshtls serve -addr :8443 -dir /tls -root /www
//	meshtls fetch -ca /tls/ca.pem -out /out/page [-every 2s] https://web.alpha.internal:8443/
//
// serve serves the files under -root over TLS with the pair a certificate
// resource keeps in -dir (cert.pem, key.pem), read again when it changes,
// so a renewal needs no restart. fetch fetches a URL verifying the server
// against the mesh root in -ca, and writes the body atomically. It uses the
// standard library only (and the project's atomic write), so it builds
// static with CGO_ENABLED=0.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// usage is what meshtls says when called wrongly.
const usage = `usage:
  meshtls serve [-addr :8443] [-dir /tls] [-root /www]
  meshtls fetch -ca FILE [-out FILE] [-every DURATION] [-timeout 10s] [-max BYTES] https://HOST[:PORT]/PATH
meshtls serve -h and meshtls fetch -h say more.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a call that was wrong: nothing was done, exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// run runs one subcommand and is its exit code: 0 done, 1 failed, 2 called
// wrongly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		log = log.With("component", "serve")
		err = serveCmd(ctx, args[1:], stderr, log)
	case "fetch":
		log = log.With("component", "fetch")
		err = fetchCmd(ctx, args[1:], stdout, stderr, log)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "meshtls: unknown command %q\n%s", args[0], usage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(stderr, "meshtls %s: %s\n", args[0], ue.msg)
		}
		return 2
	default:
		fmt.Fprintf(stderr, "meshtls %s: %v\n", args[0], err)
		return 1
	}
}
