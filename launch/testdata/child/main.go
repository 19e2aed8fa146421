// A stand-in for a version of mesh that the launcher's tests run as its
// child: not mesh, a program whose behaviour is fixed when it is built
// (-X main.behaviour=...), so each behaviour is a binary of its own with
// a digest of its own. It is called as mesh serve MODE --dir D [flags].
//
//	ready    says ready, stands aside when D/host/versions/want names
//	         another version that is not bad (or that D/host/versions/retry
//	         asks for again), stops on SIGTERM
//	exit     exits 1 at once
//	early    exits 75 (stands aside) at once
//	never    never says ready; stops on SIGTERM
//	fail     says ready, then exits 9
//	migrate  adds a table to D/controller/mesh.db, then exits 1
//	resolver (and resolver2) runs a resolver that attaches the address
//	         D/attach names, allowing 127.0.0.0/8, as a host attaches a
//	         bridge gateway; says ready once it serves, and stands aside
//	         or stops as ready does, its resolver stopped first
package main

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite"
)

var behaviour = "ready"

func main() {
	dir := ""
	for i, a := range os.Args {
		if a == "--dir" && i+1 < len(os.Args) {
			dir = os.Args[i+1]
		}
	}
	// The handler first: a test that reads "start" may stop it at once.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	note(dir, fmt.Sprintf("start %s %d %s", behaviour, os.Getpid(), strings.Join(os.Args[1:], " ")))
	if handed := os.Getenv("MESH_EXEC_SHA256"); handed != "" {
		note(dir, fmt.Sprintf("handed %d %s", os.Getpid(), handed))
	}
	if held := os.Getenv("MESH_DNS_HELD"); held != "" {
		note(dir, fmt.Sprintf("held %d %s", os.Getpid(), held))
	}
	switch behaviour {
	case "exit":
		os.Exit(1)
	case "early":
		os.Exit(75) // stands aside before it is ready

	case "migrate":
		db, err := sql.Open("sqlite", filepath.Join(dir, "controller", "mesh.db"))
		if err == nil {
			_, err = db.Exec(`CREATE TABLE v2_things (id INTEGER PRIMARY KEY); INSERT INTO v2_things VALUES (1)`)
			db.Close()
		}
		note(dir, fmt.Sprintf("migrated %d: %v", os.Getpid(), err))
		os.Exit(1)
	case "resolver", "resolver2":
		runResolver(dir, term)
		return
	case "never":
		<-term
		note(dir, fmt.Sprintf("terminated %s %d", behaviour, os.Getpid()))
		return
	}
	sayReady()
	if behaviour == "fail" {
		os.Exit(9)
	}
	self := digest()
	for {
		select {
		case s := <-term:
			note(dir, fmt.Sprintf("terminated %s %d %s", behaviour, os.Getpid(), s))
			return
		case <-time.After(20 * time.Millisecond):
		}
		if w := wanted(dir); w != "" && w != self {
			note(dir, fmt.Sprintf("aside %s %d", behaviour, os.Getpid()))
			os.Exit(75)
		}
	}
}

// sayReady writes the ready line on the launcher's pipe.
func sayReady() {
	fd, _ := strconv.Atoi(os.Getenv("MESH_READY_FD"))
	if fd > 0 {
		f := os.NewFile(uintptr(fd), "ready")
		f.Write([]byte("ready\n"))
		f.Close()
	}
}

// note appends a line to D/children.log.
func note(dir, line string) {
	f, err := os.OpenFile(filepath.Join(dir, "children.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func digest() string {
	p, _ := os.Executable()
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

// wanted is the digest want names, if it is delivered and not bad.
func wanted(dir string) string {
	versions := filepath.Join(dir, "host", "versions")
	b, err := os.ReadFile(filepath.Join(versions, "want"))
	if err != nil {
		return ""
	}
	w := strings.TrimSpace(string(b))
	if _, err := os.Stat(filepath.Join(versions, w, "mesh")); err != nil {
		return ""
	}
	var l struct {
		Bad     map[string]json.RawMessage `json:"bad"`
		Retried map[string]int             `json:"retried"`
	}
	if b, err := os.ReadFile(filepath.Join(versions, "launch.json")); err == nil {
		json.Unmarshal(b, &l)
	}
	if _, bad := l.Bad[w]; bad {
		// Bad, unless the retry file asks for it with a count not yet
		// honoured.
		b, _ := os.ReadFile(filepath.Join(versions, "retry"))
		f := strings.Fields(string(b))
		if len(f) != 2 || f[0] != w {
			return ""
		}
		if n, err := strconv.Atoi(f[1]); err != nil || n <= l.Retried[w] {
			return ""
		}
	}
	return w
}
