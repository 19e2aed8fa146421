package web

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a time the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// jar is a client that keeps cookies, Secure ones over plain HTTP too
// (the test's server is not TLS), and follows no redirect.
func jar(t *testing.T) *http.Client {
	j, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: insecureJar{j}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type insecureJar struct{ *cookiejar.Jar }

func (j insecureJar) SetCookies(u *url.URL, cs []*http.Cookie) {
	for _, c := range cs {
		c.Secure = false
	}
	j.Jar.SetCookies(u, cs)
}

// TestGateOffLoopbackNeedsASession: off loopback, a page without a
// session is the sign-in page, never the data; a login link starts a
// session once (HttpOnly, Secure, SameSite=Strict, 12 h) and never again;
// the session ends after 12 h, and a link after 5 minutes; /healthz,
// /roots.pem and the assets are open, /metrics needs the bearer token.
func TestGateOffLoopbackNeedsASession(t *testing.T) {
	clk := &clock{now: time.Now()}
	g, err := NewGate(false, "", clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	src := newFake(3, time.Now())
	_, srv := serve(t, src, g)
	c := jar(t)
	for _, path := range []string{"/", "/nodes", "/nodes/node0001", "/events", "/modules", "/activity", "/public"} {
		code, body, _ := get(t, c, srv.URL+path)
		if code != http.StatusUnauthorized || !strings.Contains(body, "Sign in") || strings.Contains(body, "node0001") {
			t.Errorf("%s without a session: %d\n%s", path, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/roots.pem", "/assets/style.css"} {
		if code, _, _ := get(t, c, srv.URL+path); code != 200 {
			t.Errorf("%s without a session: %d", path, code)
		}
	}

	token, _ := g.Login()
	resp, err := c.Get(srv.URL + "/login?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			cookie = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == nil || !cookie.HttpOnly || !cookie.Secure || cookie.SameSite != http.SameSiteStrictMode || cookie.MaxAge != 12*3600 {
		t.Fatalf("login: %d, cookie %+v", resp.StatusCode, cookie)
	}
	if code, body, _ := get(t, c, srv.URL+"/nodes"); code != 200 || !strings.Contains(body, "node0001") {
		t.Fatalf("/nodes signed in: %d\n%s", code, body)
	}
	other := jar(t)
	if code, body, _ := get(t, other, srv.URL+"/login?token="+token); code != http.StatusForbidden || !strings.Contains(body, "used already") {
		t.Fatalf("the link a second time: %d\n%s", code, body)
	}
	if code, _, _ := get(t, other, srv.URL+"/nodes"); code != http.StatusUnauthorized {
		t.Fatalf("the second browser: %d", code)
	}

	late, _ := g.Login()
	clk.add(LoginLife + time.Second)
	if code, _, _ := get(t, other, srv.URL+"/login?token="+late); code != http.StatusForbidden {
		t.Fatalf("a link 5 minutes old: %d", code)
	}
	clk.add(SessionLife)
	if code, body, _ := get(t, c, srv.URL+"/nodes"); code != http.StatusUnauthorized || strings.Contains(body, "node0001") {
		t.Fatalf("a session 12 h old: %d\n%s", code, body)
	}

	if code, _, _ := get(t, c, srv.URL+"/metrics"); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d", code)
	}
	mt, err := g.MetricsToken()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+mt)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics with the token: %d", resp.StatusCode)
	}
}

// TestMetricsTokenOutlivesARestart: the token's hash is kept in its file,
// never the token; a gate made again from the file takes it, and a new
// token replaces it.
func TestMetricsTokenOutlivesARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "metrics-token.sha256")
	g, err := NewGate(false, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := g.MetricsToken()
	if err != nil {
		t.Fatal(err)
	}
	again, err := NewGate(false, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	bearer := func(g *Gate, token string) bool {
		r, _ := http.NewRequest("GET", "/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		return g.bearer(r)
	}
	if !bearer(again, first) || bearer(again, "nope") {
		t.Fatal("the token not taken after a restart, or another taken")
	}
	second, _ := again.MetricsToken()
	if bearer(again, first) || !bearer(again, second) {
		t.Fatal("a new token did not replace the old one")
	}
}

// TestGateOnLoopbackIsOpen: on loopback every page and /metrics answer
// without a session or token, and /login goes to the fleet page.
func TestGateOnLoopbackIsOpen(t *testing.T) {
	_, srv := serve(t, newFake(1, time.Now()), nil)
	for _, path := range []string{"/", "/nodes", "/metrics"} {
		if code, _, _ := get(t, nil, srv.URL+path); code != 200 {
			t.Errorf("%s on loopback: %d", path, code)
		}
	}
	if code, _, _ := get(t, jar(t), srv.URL+"/login"); code != http.StatusSeeOther {
		t.Errorf("/login on loopback: %d", code)
	}
}
