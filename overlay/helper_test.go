package overlay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The privileged tests run each Device in a process of its own inside a
// network namespace (the TUN device, the UDP socket and the interface's
// addresses all belong to the namespace of the thread that makes them,
// and WireGuard makes its sockets from goroutines of its own), and in a
// mount namespace with its own /run/wireguard, so that `wg show mesh0`
// there sees that process's interface. The process is this test binary,
// which TestMain turns into the helper when helperEnv is set; the test
// drives it with one JSON command a line on its stdin.

// helperEnv carries the helper's Config, as JSON.
const helperEnv = "MESH_OVERLAY_TEST_HELPER"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(helperEnv); cfg != "" {
		os.Exit(runHelper(cfg))
	}
	os.Exit(m.Run())
}

// command is one line to the helper; answer its reply.
type command struct {
	Op    string   `json:"op"`
	Peers []Peer   `json:"peers,omitempty"`
	Args  []string `json:"args,omitempty"`
	Addr  string   `json:"addr,omitempty"`
	Keys  []string `json:"keys,omitempty"`
}

type answer struct {
	Err   string      `json:"err,omitempty"`
	Mode  string      `json:"mode,omitempty"`
	Peers []PeerState `json:"peers,omitempty"`
	Out   string      `json:"out,omitempty"`
	// Bytes is what the stream echoed back so far; RSS the process's
	// resident set, HeapInUse the Go heap's.
	Bytes     int64  `json:"bytes,omitempty"`
	RSS       int64  `json:"rss,omitempty"`
	HeapInUse uint64 `json:"heap,omitempty"`
}

// runHelper is the helper's main: a Device up with the Config in cfg,
// driven by stdin until it closes.
func runHelper(cfgJSON string) int {
	var cfg Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "helper config:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	d, err := New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out := json.NewEncoder(os.Stdout)
	if err := d.Up(context.Background()); err != nil {
		out.Encode(answer{Err: err.Error()})
		return 1
	}
	defer d.Down()
	out.Encode(answer{Mode: d.Mode()})
	var echoed atomic.Int64
	var streamErr atomic.Pointer[string]
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var c command
		var a answer
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			a.Err = err.Error()
			out.Encode(a)
			continue
		}
		switch c.Op {
		case "set":
			err = d.Set(c.Peers)
		case "retry":
			err = d.Retry(c.Keys)
		case "peers":
			a.Peers, err = d.Peers()
		case "forward":
			err = d.Forward(true)
		case "down":
			err = d.Down()
		case "run":
			var b []byte
			b, err = exec.Command(c.Args[0], c.Args[1:]...).CombinedOutput()
			a.Out = string(b)
		case "echo":
			err = echoServer(c.Addr)
		case "stream":
			go stream(c.Addr, &echoed, &streamErr)
		case "streamed":
			a.Bytes = echoed.Load()
			if p := streamErr.Load(); p != nil {
				err = fmt.Errorf("%s", *p)
			}
		case "memory":
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			a.HeapInUse, a.RSS = ms.HeapInuse, rss()
		default:
			err = fmt.Errorf("no op %q", c.Op)
		}
		if err != nil {
			a.Err = err.Error()
		}
		out.Encode(a)
	}
	return 0
}

// echoServer listens on addr and sends back what each connection sends.
func echoServer(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return nil
}

// stream holds one TCP connection to addr, sending and reading back a
// block at a time for as long as the process runs, counting the bytes
// echoed; a failure ends it and is kept.
func stream(addr string, echoed *atomic.Int64, failed *atomic.Pointer[string]) {
	fail := func(err error) { s := err.Error(); failed.Store(&s) }
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		fail(err)
		return
	}
	block := bytes.Repeat([]byte("mesh"), 1024)
	back := make([]byte, len(block))
	for {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(block); err != nil {
			fail(err)
			return
		}
		if _, err := io.ReadFull(c, back); err != nil {
			fail(err)
			return
		}
		echoed.Add(int64(len(back)))
		time.Sleep(20 * time.Millisecond) // a steady trickle, not a flood
	}
}

// rss is the process's resident set in bytes, from /proc/self/status.
func rss() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// helper is a running helper process, as the test drives it.
type helper struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *json.Decoder
	stderr *syncBuffer
	mode   string
	mu     sync.Mutex
}

// startHelper runs a helper with cfg in the network namespace ns, in a
// mount namespace of its own with a tmpfs on /run/wireguard.
func startHelper(t testing.TB, ns string, cfg Config) *helper {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/wireguard", 0o755); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(cfg)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, "--",
		"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount -t tmpfs tmpfs /run/wireguard && exec "$0" -test.run='^$'`, exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(body))
	h := &helper{t: t, cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = h.stderr
	h.in, _ = cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	h.out = json.NewDecoder(stdout)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("helper in %s said:\n%s", ns, h.stderr.String())
		}
	})
	var a answer
	if err := h.out.Decode(&a); err != nil || a.Err != "" {
		t.Fatalf("helper in %s: %v %s\n%s", ns, err, a.Err, h.stderr.String())
	}
	h.mode = a.Mode
	return h
}

// do sends c and returns the answer; an error answer fails the test.
func (h *helper) do(c command) answer {
	h.t.Helper()
	a, err := h.try(c)
	if err != nil {
		h.t.Fatalf("%s: %v", c.Op, err)
	}
	return a
}

// try sends c and returns the answer, its error as an error.
func (h *helper) try(c command) (answer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	body, _ := json.Marshal(c)
	var a answer
	if _, err := h.in.Write(append(body, '\n')); err != nil {
		return a, fmt.Errorf("write to the helper: %w", err)
	}
	if err := h.out.Decode(&a); err != nil {
		return a, fmt.Errorf("read the helper: %w\n%s", err, h.stderr.String())
	}
	if a.Err != "" {
		return a, fmt.Errorf("%s", a.Err)
	}
	return a, nil
}

// handshake is the last handshake the helper's interface had with key.
func (h *helper) handshake(key string) time.Time {
	h.t.Helper()
	for _, p := range h.do(command{Op: "peers"}).Peers {
		if p.Key == key {
			return p.Handshake
		}
	}
	return time.Time{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
