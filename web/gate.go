package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// How long a login link and a session last.
const (
	LoginLife   = 5 * time.Minute
	SessionLife = 12 * time.Hour
)

// sessionCookie is the session's cookie.
const sessionCookie = "mesh_session"

// policy is every page's Content-Security-Policy: its own script and
// style only, nothing inline, no frame, no form posted elsewhere.
const policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Gate is who may read the listener: on loopback anyone, as /healthz
// always; elsewhere the pages need a session, which a login link (Login)
// starts, and /metrics the metrics token (MetricsToken). /healthz,
// /roots.pem and the pages' assets are open everywhere. Login links and
// sessions are kept in memory: a restart signs every browser out. The
// metrics token is kept as its SHA-256 in a file, so a scraper's stays
// good across restarts.
type Gate struct {
	open      bool
	tokenFile string
	now       func() time.Time

	mu       sync.Mutex
	logins   map[[32]byte]time.Time // a link's token's hash, and its expiry
	sessions map[[32]byte]time.Time
	metrics  *[32]byte
}

// NewGate is the gate of a listener, open when it is on loopback; the
// metrics token's hash is read from tokenFile (none: no token yet; "":
// kept in memory only).
func NewGate(open bool, tokenFile string, now func() time.Time) (*Gate, error) {
	if now == nil {
		now = time.Now
	}
	g := &Gate{open: open, tokenFile: tokenFile, now: now, logins: map[[32]byte]time.Time{}, sessions: map[[32]byte]time.Time{}}
	if tokenFile == "" {
		return g, nil
	}
	b, err := os.ReadFile(tokenFile)
	if errors.Is(err, os.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the metrics token's hash: %w", err)
	}
	var h [32]byte
	if n, err := hex.Decode(h[:], []byte(strings.TrimSpace(string(b)))); err != nil || n != len(h) {
		return nil, fmt.Errorf("read the metrics token's hash %s: not a hex SHA-256", tokenFile)
	}
	g.metrics = &h
	return g, nil
}

// Open says the listener is on loopback: nothing needs a session.
func (g *Gate) Open() bool { return g.open }

// secret is 32 random bytes, base64url.
func secret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashOf(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// Login mints a login link's token: it starts one session, once, within
// LoginLife.
func (g *Gate) Login() (token string, expires time.Time) {
	token, expires = secret(), g.now().Add(LoginLife)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep()
	g.logins[hashOf(token)] = expires
	return token, expires
}

// MetricsToken mints the metrics token, which replaces any before it,
// and keeps its hash.
func (g *Gate) MetricsToken() (string, error) {
	token := secret()
	h := hashOf(token)
	if g.tokenFile != "" {
		tmp := g.tokenFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(hex.EncodeToString(h[:])+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("keep the metrics token's hash: %w", err)
		}
		if err := os.Rename(tmp, g.tokenFile); err != nil {
			os.Remove(tmp)
			return "", fmt.Errorf("keep the metrics token's hash: %w", err)
		}
		if d, err := os.Open(filepath.Dir(g.tokenFile)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	g.mu.Lock()
	g.metrics = &h
	g.mu.Unlock()
	return token, nil
}

// sweep forgets expired links and sessions; g.mu is held.
func (g *Gate) sweep() {
	now := g.now()
	for h, exp := range g.logins {
		if !now.Before(exp) {
			delete(g.logins, h)
		}
	}
	for h, exp := range g.sessions {
		if !now.Before(exp) {
			delete(g.sessions, h)
		}
	}
}

// redeem spends a login link's token and starts a session: its cookie's
// value; false when the token is unknown, spent or expired.
func (g *Gate) redeem(token string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep()
	h := hashOf(token)
	if _, ok := g.logins[h]; !ok {
		return "", false
	}
	delete(g.logins, h)
	session := secret()
	g.sessions[hashOf(session)] = g.now().Add(SessionLife)
	return session, true
}

// signedIn says r carries a session that has not expired.
func (g *Gate) signedIn(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	exp, ok := g.sessions[hashOf(c.Value)]
	return ok && g.now().Before(exp)
}

// bearer says r carries the metrics token.
func (g *Gate) bearer(r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	h := hashOf(strings.TrimSpace(token))
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.metrics != nil && subtle.ConstantTimeCompare(h[:], g.metrics[:]) == 1
}

// Guard is next behind g: every answer carries the pages' security
// headers; /healthz, /roots.pem and the assets are open; on loopback
// everything is; elsewhere /metrics needs the metrics token, /login
// spends a link, and every other path needs a session, without which it
// is the sign-in page and never the data.
func (p *Pages) Guard(g *Gate, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", policy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		switch path := r.URL.Path; {
		case path == "/healthz" || path == "/roots.pem" || strings.HasPrefix(path, "/assets/"):
			next.ServeHTTP(w, r)
		case path == "/login":
			p.login(g, w, r)
		case g.open:
			next.ServeHTTP(w, r)
		case path == "/metrics":
			if !g.bearer(r) {
				h.Set("WWW-Authenticate", `Bearer realm="mesh"`)
				http.Error(w, "the metrics need the bearer token mesh ui token --metrics prints", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		case !g.signedIn(r):
			p.render(w, http.StatusUnauthorized, "login", "layout.html", layout{Title: "Sign in", Data: "This browser is not signed in, or its session has ended."})
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// login spends the link's token (?token=) and starts the browser's
// session; a link spent, expired or unknown is the sign-in page again.
func (p *Pages) login(g *Gate, w http.ResponseWriter, r *http.Request) {
	if g.open {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	session, ok := g.redeem(r.URL.Query().Get("token"))
	if !ok {
		p.render(w, http.StatusForbidden, "login", "layout.html", layout{Title: "Sign in", Data: "This link was used already, or has expired."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: session, Path: "/", MaxAge: int(SessionLife / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
