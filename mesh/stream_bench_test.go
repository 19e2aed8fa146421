package mesh

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// The quiet fleet the stream benchmark follows: streamFleet nodes, each
// beating every streamBeat, their beats spread evenly over it; the page
// is measured for streamWindow once every node has been heard.
const (
	streamFleet  = 100
	streamBeat   = 10 * time.Second
	streamWindow = time.Minute
)

// BenchmarkQuietFleetStream is what one open nodes page costs the
// controller's listener while nothing changes in a fleet of 100 nodes
// that beat every 10 s: a real controller (bus, store, status, the
// pages' hub) hears every heartbeat over the bus, and one page, opened
// as a browser opens it (the page, then /events from its digest), is
// followed for a minute; each "change" fetches the page's main part
// again, as the page's script does. It reports the stream's bytes a
// minute (sse-B/min), those of the parts fetched again (refetch-B/min),
// and the events of each kind; it logs what status says at each change.
func BenchmarkQuietFleetStream(b *testing.B) {
	c, db := newControllerCfg(b, &clock{now: time.Now()}, nil, func(cfg *Config) { cfg.Now = time.Now })
	ctx := context.Background()
	names := make([]string, streamFleet)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
		if err := db.AddNode(ctx, store.Node{Name: names[i], Address: "10.0.0.1", NKey: "U" + names[i], Joined: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	beats, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		tick := time.NewTicker(streamBeat / streamFleet)
		defer tick.Stop()
		for i := 0; ; i++ {
			n := names[i%len(names)]
			hb := spec.Heartbeat{Node: n, Time: time.Now(), Protocol: spec.Protocol, HostVersion: "bench", IntervalMS: streamBeat.Milliseconds()}
			c.nc.Publish(spec.NodeSubject(n, spec.KindHeartbeat), mustJSON(b, hb))
			select {
			case <-beats.Done():
				return
			case <-tick.C:
			}
		}
	}()
	poll.Until(b, 3*streamBeat, "every node heard", func() error {
		st, err := c.status(ctx, spec.StatusRequest{})
		heard := 0
		for _, n := range st.Nodes {
			if n.LastHeard != nil && n.Node != "alpha" {
				heard++
			}
		}
		if err == nil && heard == streamFleet {
			return nil
		}
		return fmt.Errorf("%d heard (%v)", heard, err)
	})
	srv := httptest.NewServer(c.httpHandler())
	defer srv.Close()

	for b.Loop() {
		s := followPage(b, srv.URL, "/nodes", streamWindow, func() {
			st, err := c.status(ctx, spec.StatusRequest{})
			var silent []string
			for _, n := range st.Nodes {
				if n.Silent {
					silent = append(silent, n.Node)
				}
			}
			b.Logf("a change on a quiet fleet: status says %q, silent %v (%v)", st.Problems, silent, err)
		})
		per := float64(time.Minute) / float64(streamWindow)
		b.ReportMetric(float64(s.stream)*per, "sse-B/min")
		b.ReportMetric(float64(s.refetched)*per, "refetch-B/min")
		b.ReportMetric(float64(s.heard)*per, "heard/min")
		b.ReportMetric(float64(s.changes)*per, "changes/min")
		b.ReportMetric(float64(s.kept)*per, "keepalives/min")
	}
}

// followed is what following a page for a while cost: the stream's
// bytes (its body, as read), those of the parts fetched again on a
// change, and the stream's events by kind.
type followed struct {
	stream, refetched    int64
	heard, changes, kept int
}

var pageDigest = regexp.MustCompile(`data-digest="([0-9a-f]*)"`)

// followPage opens path at base as a browser does and follows its
// stream for window, calling changed on each change.
func followPage(b *testing.B, base, path string, window time.Duration, changed func()) followed {
	b.Helper()
	res, err := http.Get(base + path)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := pageDigest.FindSubmatch(body)
	if res.StatusCode != http.StatusOK || m == nil {
		b.Fatalf("%s: %s, no digest", path, res.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/events?digest="+string(m[1]), nil)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var f followed
	var read atomic.Int64
	lines := bufio.NewScanner(io.TeeReader(res.Body, countWriter{&read}))
	for lines.Scan() {
		switch line := lines.Text(); {
		case line == "event: heard":
			f.heard++
		case line == ":":
			f.kept++
		case line == "event: change":
			f.changes++
			changed()
			f.refetched += refetch(b, base+path)
		case strings.HasPrefix(line, "data: ") || line == "" || strings.HasPrefix(line, "retry: "):
		default:
			b.Fatalf("the stream said %q", line)
		}
	}
	f.stream = read.Load()
	return f
}

// refetch is how many bytes the page's main part is, fetched again as
// the page's script does on a change.
func refetch(b *testing.B, url string) int64 {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Mesh-Fragment", "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	n, _ := io.Copy(io.Discard, res.Body)
	return n
}

// countWriter counts what is written through it.
type countWriter struct{ n *atomic.Int64 }

func (w countWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }
