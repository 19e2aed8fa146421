package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"
)

// serveCmd is meshtls serve: the files under -root over TLS on -addr, with
// the certificate kept in -dir, until ctx ends.
func serveCmd(ctx context.Context, args []string, stderr io.Writer, log *slog.Logger) error {
	fl := flag.NewFlagSet("meshtls serve", flag.ContinueOnError)
	fl.SetOutput(stderr)
	addr := fl.String("addr", ":8443", "the address to serve TLS on, `HOST:PORT`")
	dir := fl.String("dir", "/tls", "the `directory` holding cert.pem and key.pem, a certificate resource's path; read again when it changes")
	root := fl.String("root", "/www", "the `directory` whose files are served")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: meshtls serve [-addr :8443] [-dir /tls] [-root /www]\n\nServes the files under -root over TLS, with the certificate in -dir\n(cert.pem: the leaf then the intermediate; key.pem). The pair is read\nagain when -dir's ..data link (or, without one, cert.pem or key.pem)\nchanges, so a renewed certificate is served without a restart.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return usageError{}
	}
	if fl.NArg() > 0 {
		return usagef("serve takes no arguments, and flags go before any: %q", fl.Args())
	}
	if info, err := os.Stat(*root); err != nil {
		return usagef("-root %s: %v: give the directory to serve", *root, err)
	} else if !info.IsDir() {
		return usagef("-root %s is not a directory: give the directory to serve", *root)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on -addr %s: %w", *addr, err)
	}
	return serve(ctx, ln, *dir, *root, log)
}

// serve serves root's files over TLS on ln, with the certificate kept in
// dir, until ctx ends; then it lets requests in flight finish (for up to
// 5 s) and returns nil.
func serve(ctx context.Context, ln net.Listener, dir, root string, log *slog.Logger) error {
	src := &pairSource{dir: dir, log: log}
	srv := &http.Server{
		Handler: http.FileServer(http.Dir(root)),
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: src.get,
		},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("serving", "addr", ln.Addr().String(), "root", root, "certificate", dir)
	// Says at once whether the certificate is there, rather than at the
	// first handshake.
	_, _ = src.get(nil)

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	err := srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		log.Info("stopped")
		return nil
	}
	return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
}
