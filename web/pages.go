// Package web is the controller's status page: the fleet, its nodes, a
// node, the modules, the pushes and rolls and the public names, rendered with html/template
// from a read-only Source, its few assets embedded in the binary, followed
// live over one Server-Sent Events stream; and the access rules of the
// listener it is served on (Gate): open on loopback, a login link and a
// session elsewhere, a bearer token for /metrics. Nothing on a page
// changes the fleet.
package web

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// readTimeout bounds the reads one page makes of its Source.
const readTimeout = 10 * time.Second

// Pages renders the status pages and follows the fleet for the live ones.
type Pages struct {
	src  Source
	now  func() time.Time
	log  *slog.Logger
	tmpl map[string]*template.Template
	hub  *hub
}

// New parses the templates; it starts nothing (Run follows the fleet).
func New(src Source, log *slog.Logger, now func() time.Time) (*Pages, error) {
	if now == nil {
		now = time.Now
	}
	p := &Pages{src: src, now: now, log: log, tmpl: map[string]*template.Template{}}
	for _, page := range []string{"fleet", "nodes", "node", "modules", "activity", "public", "login", "problem"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/parts.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("parse the %s page: %w", page, err)
		}
		p.tmpl[page] = t
	}
	p.hub = newHub(src, now, log)
	return p, nil
}

// Run follows the fleet for the open pages' streams until ctx ends.
func (p *Pages) Run(ctx context.Context) { p.hub.run(ctx) }

// Register adds the pages, their stream and their assets to mux.
func (p *Pages) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", p.page("fleet", p.fleet))
	mux.HandleFunc("GET /nodes", p.page("nodes", p.nodes))
	mux.HandleFunc("GET /nodes/{name}", p.page("node", p.node))
	mux.HandleFunc("GET /modules", p.page("modules", p.modules))
	mux.HandleFunc("GET /activity", p.page("activity", p.activity))
	mux.HandleFunc("GET /public", p.page("public", p.public))
	mux.HandleFunc("GET /events", p.events)
	assets, _ := fs.Sub(assetFiles, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
}

// layout is what every page's frame shows around its own part.
type layout struct {
	Title string
	Nav   string // which link of the bar is this page
	Data  any
	// Digest is that of the status the page was made from, where its
	// stream starts (empty: the first reading is a change).
	Digest string
}

// view is what a page read: its title, its data, and the digest of the
// status it was made from.
type view struct {
	title  string
	data   any
	digest string
}

// page serves one page: its data read by read, rendered whole, or only
// its main part when the page's script asks for it (X-Mesh-Fragment)
// to put in place.
func (p *Pages) page(name string, read func(*http.Request) (view, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		defer cancel()
		v, err := read(r.WithContext(ctx))
		if err != nil {
			p.fail(w, err)
			return
		}
		root := "layout.html"
		if r.Header.Get("X-Mesh-Fragment") == "1" {
			root = "main"
		}
		p.render(w, http.StatusOK, name, root, layout{Title: v.title, Nav: name, Data: v.data, Digest: v.digest})
	}
}

// render writes page's template root with data, or a failure if it does
// not render: a page is rendered into memory first, never half sent.
func (p *Pages) render(w http.ResponseWriter, code int, page, root string, data any) {
	var b bytes.Buffer
	if err := p.tmpl[page].ExecuteTemplate(&b, root, data); err != nil {
		p.log.Error("page not rendered", "page", page, "err", err)
		http.Error(w, "the page could not be rendered: the controller's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// fail answers a page whose data could not be read.
func (p *Pages) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if spec.KindOf(err) == spec.ReplyNotFound {
		code = http.StatusNotFound
	} else {
		p.log.Error("page not read", "err", err)
	}
	p.render(w, code, "problem", "layout.html", layout{Title: "Not shown", Data: err.Error()})
}

// problemLine is one thing standing in the way of the all-clear, cut
// into the text it says and the nodes it names, each shown as a link.
type problemLine []problemPart

// problemPart is a stretch of a problem line: a node's name when Node
// is set, plain text otherwise.
type problemPart struct {
	Text string
	Node string
}

// problemParts cuts line around every node of names it holds as a word
// of its own: a run of letters, digits, '-', '_' and inner dots equal to
// the name, so that neither "alpha-2" nor "www.alpha.example" names
// alpha.
func problemParts(line string, names []string) problemLine {
	known := make(map[string]bool, len(names))
	for _, n := range names {
		known[n] = true
	}
	var out problemLine
	text := 0 // where the text not yet in out starts
	for i := 0; i < len(line); {
		if !wordByte(line[i]) {
			i++
			continue
		}
		j := i
		for j < len(line) && (wordByte(line[j]) || line[j] == '.' && j+1 < len(line) && wordByte(line[j+1])) {
			j++
		}
		if known[line[i:j]] {
			if text < i {
				out = append(out, problemPart{Text: line[text:i]})
			}
			out = append(out, problemPart{Node: line[i:j]})
			text = j
		}
		i = j
	}
	if text < len(line) {
		out = append(out, problemPart{Text: line[text:]})
	}
	return out
}

// wordByte is whether c can be part of a name in a problem line.
func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// errNotFound is a page's own "no such thing", shown as a 404.
type errNotFound string

func (e errNotFound) Error() string   { return string(e) }
func (errNotFound) ReplyKind() string { return spec.ReplyNotFound }
