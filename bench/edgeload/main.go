// Command edgeload is bench/edge.sh's load generator, backend and probe,
// on the standard library alone. One of four modes:
//
//	edgeload -serve ADDR [-cert F -key F]
//	    a backend answering every request with a short page, over HTTPS
//	    with -cert and -key, plain HTTP otherwise, until SIGINT or SIGTERM
//	edgeload -load URL [-connect ADDR] [-cacert F] [-c 32] [-d 5s]
//	    -c connections, each its own HTTP/1.1 keep-alive connection, sending
//	    one request after another for -d; prints requests/s, p50, p99 and
//	    errors (a transport error or a status other than 200)
//	edgeload -wait URL[,URL...] [-connect ADDR] [-cacert F] [-since NS]
//	    each URL asked on a new connection every -every until it answers
//	    200; prints the milliseconds from -since (Unix nanoseconds, now by
//	    default) to each one's first answer, and the last
//	edgeload -ports N
//	    N free loopback ports outside the kernel's ephemeral range
//
// -connect sends every connection to ADDR whatever the URL's host, as curl's
// --resolve does; -cacert verifies the server's chain against the PEM roots
// in F, for the URL's host.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	serve := flag.String("serve", "", "serve a backend on ADDR")
	cert := flag.String("cert", "", "with -serve: the certificate chain to serve HTTPS with (PEM)")
	key := flag.String("key", "", "with -serve: the certificate's key (PEM)")
	load := flag.String("load", "", "load URL")
	wait := flag.String("wait", "", "wait for each of these URLs, comma-separated, to answer 200")
	ports := flag.Int("ports", 0, "print this many free loopback ports")
	connect := flag.String("connect", "", "dial ADDR (host:port) for every URL, whatever its host")
	cacert := flag.String("cacert", "", "verify servers against the PEM roots in this file")
	conns := flag.Int("c", 32, "with -load: connections, each sending one request after another")
	dur := flag.Duration("d", 5*time.Second, "with -load: how long to send for")
	since := flag.Int64("since", 0, "with -wait: when the wait began, Unix nanoseconds (default: now)")
	every := flag.Duration("every", 50*time.Millisecond, "with -wait: how often each URL is asked")
	timeout := flag.Duration("timeout", 3*time.Minute, "with -wait: how long to wait for every URL")
	flag.Parse()

	var err error
	switch {
	case *serve != "":
		err = serveBackend(*serve, *cert, *key)
	case *load != "":
		err = runLoad(*load, *connect, *cacert, *conns, *dur)
	case *wait != "":
		start := time.Now()
		if *since != 0 {
			start = time.Unix(0, *since)
		}
		err = waitFor(strings.Split(*wait, ","), *connect, *cacert, start, *every, *timeout)
	case *ports > 0:
		err = freePorts(*ports)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgeload:", err)
		os.Exit(1)
	}
}

// page is what the backend answers.
const page = "hello from the backend\n"

// serveBackend answers page on addr until SIGINT or SIGTERM.
func serveBackend(addr, cert, key string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, page)
		}),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if cert != "" {
		err = srv.ServeTLS(ln, cert, key)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// client is an HTTP/1.1 client of one connection at a time, dialling
// connect when given and verifying against the roots in cacert when given.
func client(connect, cacert string, keepAlive bool) (*http.Client, error) {
	tc := &tls.Config{NextProtos: []string{"http/1.1"}}
	if cacert != "" {
		pemBytes, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("read the roots: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("%s holds no PEM certificate", cacert)
		}
		tc.RootCAs = pool
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		DisableCompression:  true,
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 1,
		MaxConnsPerHost:     1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if connect != "" {
				addr = connect
			}
			return d.DialContext(ctx, network, addr)
		},
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, nil
}

// get asks u once: an error unless it answers 200.
func get(c *http.Client, u string) error {
	res, err := c.Get(u)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, res.Status)
	}
	return nil
}

// runLoad sends requests to u on conns connections for d and prints what
// they took.
func runLoad(u, connect, cacert string, conns int, d time.Duration) error {
	if _, err := url.Parse(u); err != nil {
		return fmt.Errorf("parse %s: %w", u, err)
	}
	clients := make([]*http.Client, conns)
	for i := range clients {
		c, err := client(connect, cacert, true)
		if err != nil {
			return err
		}
		// Each connection is made (the handshake done) before the clock
		// starts: the figures are of a kept-alive connection.
		if err := get(c, u); err != nil {
			return fmt.Errorf("first request: %w", err)
		}
		clients[i] = c
	}
	lat := make([][]time.Duration, conns)
	errs := make([]int, conns)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t := time.Now()
				if !t.Before(end) {
					return
				}
				if err := get(c, u); err != nil {
					errs[i]++
					continue
				}
				lat[i] = append(lat[i], time.Since(t))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	nerr := 0
	for _, n := range errs {
		nerr += n
	}
	if len(all) == 0 {
		return fmt.Errorf("no request answered (%d errors)", nerr)
	}
	fmt.Printf("rps %.0f p50_ms %.3f p99_ms %.3f errors %d requests %d\n",
		float64(len(all))/elapsed.Seconds(), ms(quantile(all, 0.50)), ms(quantile(all, 0.99)), nerr, len(all))
	return nil
}

// quantile is the q-th quantile of sorted d, the nearest rank.
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(float64(len(d))*q+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// waitFor asks each of urls every interval until it answers 200 and
// prints, for each, the milliseconds from start to its first answer.
func waitFor(urls []string, connect, cacert string, start time.Time, every, timeout time.Duration) error {
	c, err := client(connect, cacert, false)
	if err != nil {
		return err
	}
	c.Timeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	took := make([]time.Duration, len(urls))
	last := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the first asks over one interval.
			time.Sleep(time.Duration(rand.Int64N(int64(every))))
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				if last[i] = get(c, u); last[i] == nil {
					took[i] = time.Since(start)
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	wg.Wait()
	var worst time.Duration
	for i, u := range urls {
		if last[i] != nil {
			return fmt.Errorf("%s not answered within %s: %w", u, timeout, last[i])
		}
		fmt.Printf("%s %.0f\n", u, ms(took[i]))
		worst = max(worst, took[i])
	}
	fmt.Printf("last %.0f\n", ms(worst))
	return nil
}

// freePorts prints n loopback ports, free for TCP and UDP, outside the
// kernel's ephemeral range, so no connection the load makes takes one.
func freePorts(n int) error {
	low, high := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			low, _ = strconv.Atoi(f[0])
			high, _ = strconv.Atoi(f[1])
		}
	}
	var pool []int
	for p := 20000; p <= 65535; p++ {
		if p < low || p > high {
			pool = append(pool, p)
		}
	}
	if len(pool) < 100 {
		return fmt.Errorf("the ephemeral range %d-%d leaves too few ports outside it", low, high)
	}
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for tries := 0; n > 0 && tries < 1000; tries++ {
		p := pool[rand.IntN(len(pool))]
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			ln.Close()
			continue
		}
		held = append(held, ln, pc)
		fmt.Println(p)
		n--
	}
	if n > 0 {
		return errors.New("no free port found")
	}
	return nil
}
