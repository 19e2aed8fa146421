package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/spec"
)

// screenshotEnv names the file the fleet page's screenshot is written to
// (docs/status-page.png is made so); unset, none is taken.
const screenshotEnv = "MESH_SCREENSHOT"

// browser is Debian's chromium, headless, for one test: its certificate
// errors ignored (a listener off loopback serves the mesh's own).
func browser(t *testing.T) context.Context {
	t.Helper()
	optin.NeedBrowser(t)
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium to drive (apt-get install chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800), chromedp.Flag("ignore-certificate-errors", true))
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(cancelCtx)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// tab is a tab of its own browser context (its own cookies) and what it
// saw go wrong: console errors, uncaught exceptions, errors the browser
// logged (a policy violation, a resource that failed), dialogs opened.
type tab struct {
	ctx     context.Context
	mu      sync.Mutex
	errors  []string
	dialogs []string
}

func newTab(t *testing.T, browser context.Context) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tb := &tab{ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if string(ev.Type) == "error" {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				tb.errors = append(tb.errors, "console.error "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			tb.errors = append(tb.errors, "exception "+ev.ExceptionDetails.Text)
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				tb.errors = append(tb.errors, fmt.Sprintf("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		case *page.EventJavascriptDialogOpening:
			tb.dialogs = append(tb.dialogs, ev.Message)
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	return tb
}

// open navigates the tab to url, again when chromium gave up the load
// because the machine's network changed (networkChanged).
func (tb *tab) open(t *testing.T, url string) {
	t.Helper()
	poll.Until(t, 60*time.Second, "open "+url, func() error {
		err := tb.try(url)
		if err != nil && !networkChanged(err) {
			t.Fatalf("open %s: %v", url, err)
		}
		return err
	})
}

// try navigates the tab to url once.
func (tb *tab) try(url string) error {
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Do(ctx, chromedp.Navigate(url))
}

// networkChanged says chromium abandoned a load because an interface or
// an address of the machine came or went: the other end-to-end tests
// add them (namespaces, veths, test addresses on lo, Docker's bridges)
// while these run.
func networkChanged(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ERR_NETWORK_CHANGED")
}

// eval is the value of a script in the tab's page.
func eval[T any](t *testing.T, tb *tab, script string) (T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](script))
}

// text is the page's main text.
func (tb *tab) text(t *testing.T) string {
	t.Helper()
	s, err := eval[string](t, tb, `document.body.innerText`)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seen is what went wrong in the tab so far.
func (tb *tab) seen() (errs, dialogs []string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.errors...), append([]string(nil), tb.dialogs...)
}

// pageLag is how long an open page may take, past the moment status
// says a node is silent, to show it: the hub's look just past the
// deadline, the stream's event, and the page's fetch of its main part;
// one heartbeat of the rig's.
const pageLag = 500 * time.Millisecond

// TestStatusPageFollowsTheFleetInABrowser: in chromium, the nodes page
// lists the three hosts; a push shows each node's new sequence on the
// open page, and a host killed shows as silent, by the page's clock,
// within the silence rule (two heartbeats and the rule's allowance, 2 s
// at 500 ms) and pageLag of the last heartbeat the controller heard from
// it, neither with a reload; facts a node sent holding markup are shown
// as text and open no dialog; and no page logs an error.
func TestStatusPageFollowsTheFleetInABrowser(t *testing.T) {
	b := browser(t)
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir(), "--heartbeat", "500ms")
	m.join(t, "beta", "--root", t.TempDir())
	gammaDir, gamma := m.join(t, "gamma", "--root", t.TempDir())
	tb := newTab(t, b)
	base := "http://" + m.addrs.HTTP

	tb.open(t, base+"/nodes")
	poll.Until(t, 10*time.Second, "the nodes page lists alpha, beta and gamma, its stream open", func() error {
		names, err := eval[string](t, tb, `[...document.querySelectorAll("tr[data-node]")].map(r => r.dataset.node).join(",") + (document.getElementById("live").hidden ? "" : " live")`)
		if names == "alpha,beta,gamma live" {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("the page lists %q", names)
	})
	// A reload would lose the mark.
	if _, err := eval[int](t, tb, `window.meshMark = 1`); err != nil {
		t.Fatal(err)
	}
	unreloaded := func() bool { mark, err := eval[int](t, tb, `window.meshMark || 0`); return err == nil && mark == 1 }

	mustRun(t, "module", "register", "--dir", m.dir, fileModule(t, "motd", "/etc/motd", "hello\n"))
	for _, n := range []string{"alpha", "beta", "gamma"} {
		mustRun(t, "assign", "--dir", m.dir, "motd", n)
	}
	o := push(t, m.dir)
	seqs := map[string]uint64{}
	for _, n := range o.Nodes {
		seqs[n.Node] = n.Seq
	}
	poll.Until(t, 5*time.Second, "the open page shows the pushed sequences", func() error {
		shown, err := eval[map[string]string](t, tb, `Object.fromEntries([...document.querySelectorAll("tr[data-node]")].map(r => [r.dataset.node, r.querySelector(".applied").textContent]))`)
		for node, seq := range seqs {
			if shown[node] != fmt.Sprint(seq) {
				return fmt.Errorf("shown %v, pushed %v, %v", shown, seqs, err)
			}
		}
		if unreloaded() {
			return nil
		}
		return errors.New("reloaded")
	})

	// The page notes, by its own clock, when gamma's row turns silent: the
	// time is the page's, not that of this test's polls.
	if _, err := eval[bool](t, tb, `new MutationObserver(() => {
		const row = document.querySelector('tr[data-node="gamma"]');
		if (!window.meshSilentAt && row && row.classList.contains("silent")) { window.meshSilentAt = Date.now(); }
	}).observe(document.body, {subtree: true, childList: true, attributes: true, attributeFilter: ["class"]}) === undefined`); err != nil {
		t.Fatal(err)
	}
	gamma.kill9(t)
	killed := time.Now()
	rule := mesh.SilentAfter(500 * time.Millisecond)
	poll.Until(t, rule+pageLag+5*time.Second, "gamma silent on the open page", func() error {
		at, err := eval[float64](t, tb, `window.meshSilentAt || 0`)
		switch {
		case err != nil:
			return err
		case at == 0:
			return errors.New("gamma not shown silent")
		case !unreloaded():
			return errors.New("the page reloaded")
		}
		return nil
	})
	at, _ := eval[float64](t, tb, `window.meshSilentAt`)
	shown := time.UnixMilli(int64(at))
	st, _ := statusOf(t, m.dir)
	var heard time.Time
	for _, n := range st.Nodes {
		if n.Node == "gamma" && n.LastHeard != nil {
			heard = *n.LastHeard
		}
	}
	t.Logf("gamma shown silent %s after its kill, %s after its last heartbeat (the rule: %s)",
		shown.Sub(killed).Round(10*time.Millisecond), shown.Sub(heard).Round(10*time.Millisecond), rule)
	if heard.IsZero() || shown.Sub(heard) > rule+pageLag {
		t.Errorf("gamma shown silent %s after its last heartbeat at %s, want within %s (the silence rule) and %s", shown.Sub(heard), heard, rule, pageLag)
	}

	tb.open(t, base+"/")
	if text := tb.text(t); !strings.Contains(text, "Not all clear") || !strings.Contains(text, "gamma has not been heard for") {
		t.Fatalf("the fleet page does not say gamma stops the all-clear:\n%s", text)
	}
	if link, err := eval[string](t, tb, `document.querySelector('#problems a[href="/nodes/gamma"]').textContent`); err != nil || link != "gamma" {
		t.Fatalf("gamma's problem links to no node: %q %v", link, err)
	}
	if file := os.Getenv(screenshotEnv); file != "" {
		ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// gamma's credentials, its host dead, send facts of their own.
	const hostile = `<img src=x onerror=alert(1)>`
	nc, _, err := nodeConn(t, m, gammaDir)
	if err != nil {
		t.Fatal(err)
	}
	var facts bytes.Buffer
	enc := json.NewEncoder(&facts)
	enc.SetEscapeHTML(false) // as a node may send it
	enc.Encode(spec.Facts{Node: "gamma", Time: time.Now(), Arch: "amd64", OS: "linux", Kernel: hostile, Hostname: hostile, Cores: 1})
	if err := nc.Publish(spec.NodeSubject("gamma", spec.KindFacts), bytes.TrimSpace(facts.Bytes())); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	poll.Until(t, 10*time.Second, "gamma's page shows its facts as text", func() error {
		tb.open(t, base+"/nodes/gamma")
		text := tb.text(t)
		if strings.Contains(text, "Kernel\t"+hostile) {
			return nil
		}
		return errors.New(text)
	})
	if n, err := eval[int](t, tb, `document.querySelectorAll("img").length`); err != nil || n != 0 {
		t.Fatalf("gamma's facts made %d img element(s) (%v)", n, err)
	}
	errs, dialogs := tb.seen()
	if len(dialogs) > 0 {
		t.Errorf("dialogs opened: %q", dialogs)
	}
	if len(errs) > 0 {
		t.Errorf("the pages logged errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestStatusPageNeedsASignInOffLoopback: a controller whose HTTP listener
// is bound to every address serves TLS and shows a browser without a
// session the sign-in page, not the fleet; mesh ui's link signs one
// browser in, and a second time signs none; a session the controller
// does not know (as an expired one) gets the sign-in page; /healthz is
// open and /metrics takes mesh ui token --metrics's bearer token.
func TestStatusPageNeedsASignInOffLoopback(t *testing.T) {
	b := browser(t)
	t.Parallel()
	dir := t.TempDir() + "/ctl"
	listen := testport.Addr(t, "0.0.0.0")
	d := genesis(t, dir, "--http", listen)
	base := "https://127.0.0.1:" + listen[strings.LastIndex(listen, ":")+1:]
	roots := x509.NewCertPool()
	poll.Until(t, 30*time.Second, "the controller's /healthz over TLS", func() error {
		d.alive(t)
		pem, errOut, code := runMesh(t, "ca", "roots", "--dir", dir)
		if code != 0 {
			return fmt.Errorf("mesh ca roots: %s", errOut)
		}
		roots.AppendCertsFromPEM([]byte(pem))
		return getTLS(roots, base+"/healthz", "", http.StatusOK)
	})
	if err := getTLS(roots, base+"/metrics", "", http.StatusUnauthorized); err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(mustRun(t, "ui", "token", "--metrics", "--dir", dir))
	if err := getTLS(roots, base+"/metrics", token, http.StatusOK); err != nil {
		t.Fatal(err)
	}

	stranger := newTab(t, b)
	stranger.open(t, base+"/nodes")
	if text := stranger.text(t); !strings.Contains(text, "Sign in") || strings.Contains(text, "alpha") {
		t.Fatalf("a browser without a session was shown:\n%s", text)
	}

	// A load chromium abandoned for a network change may have spent its
	// link at the controller without keeping the cookie: a new link then.
	var link string
	first := newTab(t, b)
	poll.Until(t, 60*time.Second, "a login link opened", func() error {
		link = strings.TrimSpace(mustRun(t, "ui", "--dir", dir, "--host", "127.0.0.1"))
		if !strings.HasPrefix(link, base+"/login?token=") {
			t.Fatalf("mesh ui printed %q, want a link under %s", link, base)
		}
		err := first.try(link)
		if err != nil && !networkChanged(err) {
			t.Fatalf("open %s: %v", link, err)
		}
		return err
	})
	first.open(t, base+"/nodes")
	if text := first.text(t); strings.Contains(text, "Sign in") || !strings.Contains(text, "alpha") {
		t.Fatalf("the link did not sign the browser in:\n%s", text)
	}
	cookies, err := chromedp.Call(first.ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range cookies.Cookies {
		if c.Name == "mesh_session" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || !session.Secure || session.SameSite != network.CookieSameSiteStrict {
		t.Fatalf("the session's cookie: %+v", session)
	}

	second := newTab(t, b)
	second.open(t, link)
	if text := second.text(t); !strings.Contains(text, "used already") {
		t.Fatalf("the link a second time:\n%s", text)
	}
	second.open(t, base+"/nodes")
	if text := second.text(t); !strings.Contains(text, "Sign in") || strings.Contains(text, "alpha") {
		t.Fatalf("the link signed a second browser in:\n%s", text)
	}

	unknown := newTab(t, b)
	if _, err := chromedp.Call(unknown.ctx, network.SetCookie, network.SetCookieParams{Name: "mesh_session", Value: session.Value + "x",
		URL: base + "/", Secure: ptr(true), HTTPOnly: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	unknown.open(t, base+"/nodes")
	if text := unknown.text(t); !strings.Contains(text, "Sign in") || strings.Contains(text, "alpha") {
		t.Fatalf("a session the controller does not hold was shown:\n%s", text)
	}
}

func ptr[T any](v T) *T { return &v }

// getTLS asks url over TLS verified against roots, with a bearer token
// when one is given, and wants code.
func getTLS(roots *x509.CertPool, url, token string, code int) error {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != code {
		return fmt.Errorf("GET %s: %d, want %d", url, resp.StatusCode, code)
	}
	return nil
}
