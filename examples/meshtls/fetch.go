package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/mesh-fleet/mesh/internal/safefile"
)

// fetchConfig is what meshtls fetch was asked.
type fetchConfig struct {
	url     string
	ca      string        // the file holding the roots the server must chain to
	out     string        // the file written, or "-" for standard output
	every   time.Duration // 0: once
	timeout time.Duration // of one fetch
	max     int64         // the largest body taken, in bytes
}

// fetchCmd is meshtls fetch: the URL fetched with the server verified
// against -ca, its body written to -out; with -every, again and again
// until ctx ends.
func fetchCmd(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) error {
	fl := flag.NewFlagSet("meshtls fetch", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var c fetchConfig
	fl.StringVar(&c.ca, "ca", "", "the `file` of PEM roots the server's certificate must chain to: the mesh root (mesh ca roots, or a certificate resource's ca.pem)")
	fl.StringVar(&c.out, "out", "-", "the `file` the body is written to, atomically (- for standard output)")
	fl.DurationVar(&c.every, "every", 0, "fetch again at this interval until stopped, logging only what changed (0: once)")
	fl.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long one fetch may take")
	fl.Int64Var(&c.max, "max", 1<<20, "the largest body taken, in `bytes`")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: meshtls fetch -ca FILE [-out FILE] [-every DURATION] https://HOST[:PORT]/PATH\n\nFetches the URL over TLS, verifying the server's certificate against the\nroots in -ca and its name against HOST (there is no way to turn that off),\nand writes the body to -out atomically: a reader sees the old file or the\nnew one. A failed fetch leaves -out as it was.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return usageError{}
	}
	if fl.NArg() != 1 {
		return usagef("give one URL, after the flags (got %q)", fl.Args())
	}
	c.url = fl.Arg(0)
	u, err := url.Parse(c.url)
	switch {
	case err != nil:
		return usagef("the URL %q: %v", c.url, err)
	case u.Scheme != "https":
		return usagef("fetch verifies the server it reaches, so the URL must be https://, not %q", c.url)
	case u.Host == "":
		return usagef("the URL %q names no host", c.url)
	case c.ca == "":
		return usagef("-ca is required: the file of the roots the server must chain to (the mesh root: mesh ca roots, or a certificate resource's ca.pem)")
	case c.every < 0 || c.timeout <= 0 || c.max <= 0:
		return usagef("-every must be 0 or more, -timeout and -max more than 0")
	}
	if c.every == 0 {
		return fetchOnce(ctx, c, stdout)
	}
	return fetchEvery(ctx, c, stdout, log)
}

// fetchEvery fetches at c.every until ctx ends, logging a failure when it
// differs from the last one and a success after a failure (or the first),
// so a fetch that keeps working logs nothing. It returns nil when ctx ends.
func fetchEvery(ctx context.Context, c fetchConfig, stdout io.Writer, log *slog.Logger) error {
	last := "never fetched"
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	for {
		if err := fetchOnce(ctx, c, stdout); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if msg := err.Error(); msg != last {
				log.Error("fetch failed; trying again", "url", c.url, "every", c.every, "err", err)
				last = msg
			}
		} else if last != "" {
			log.Info("fetched", "url", c.url, "out", c.out)
			last = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// fetchOnce fetches c.url once, verifying the server against the roots in
// c.ca (read each time: the file may come later than the program), and
// writes the body to c.out.
func fetchOnce(ctx context.Context, c fetchConfig, stdout io.Writer) error {
	roots, err := readRoots(c.ca)
	if err != nil {
		return err
	}
	client := &http.Client{
		Timeout: c.timeout,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true, // a round each -every: no connection kept between
			// No proxy from the environment: the mesh's names are reached
			// directly.
			Proxy: nil,
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", c.url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return explain(c, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: the server answered %s", c.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.max+1))
	if err != nil {
		return fmt.Errorf("GET %s: reading the body: %w", c.url, err)
	}
	if int64(len(body)) > c.max {
		return fmt.Errorf("GET %s: the body is over %d bytes (-max); nothing was written", c.url, c.max)
	}
	if c.out == "-" {
		_, err := stdout.Write(body)
		return err
	}
	if err := safefile.WriteFile(c.out, body, 0o644); err != nil {
		return fmt.Errorf("write what GET %s answered to %s: %w", c.url, c.out, err)
	}
	return nil
}

// readRoots is the pool of the certificates in the PEM file path.
func readRoots(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the roots to verify against: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("-ca %s holds no PEM certificate: give the mesh root (mesh ca roots, or a certificate resource's ca.pem)", path)
	}
	return pool, nil
}

// explain says why a request failed, in the words of what to check when
// the server's certificate did not verify.
func explain(c fetchConfig, err error) error {
	// The URL is said once, by what is returned.
	if ue, ok := err.(*url.Error); ok {
		err = ue.Err
	}
	var (
		unknown x509.UnknownAuthorityError
		name    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("GET %s: the server's certificate does not chain to a root in %s: %w", c.url, c.ca, err)
	case errors.As(err, &name):
		return fmt.Errorf("GET %s: the server's certificate is not for the name asked: %w", c.url, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("GET %s: the server's certificate is not valid: %w", c.url, err)
	}
	return fmt.Errorf("GET %s: %w", c.url, err)
}
