package host

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/spec"
	"golang.org/x/sys/unix"
)

// BlobFetcher fetches the content of a blob by digest; the engine verifies
// size and digest itself.
type BlobFetcher interface {
	Fetch(ctx context.Context, digest string, size int64) ([]byte, error)
}

// Applied is the host's record of one resource it applied (kept in
// state.json).
type Applied struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Path   string `json:"path"`
	Digest string `json:"digest"` // the resource's Digest() when it was applied; "" when its apply failed
	// OnRemove is a directory's on_remove: what its removal does with what
	// it holds that nothing declares.
	OnRemove string `json:"on_remove,omitempty"`
}

// applied is the record of r, applied (digest given) or tried.
func applied(r spec.Resource, digest string) Applied {
	a := Applied{Name: r.Name, Kind: r.Kind, Path: r.Target(), Digest: digest}
	if r.Directory != nil {
		a.OnRemove = r.Directory.OnRemove
	}
	return a
}

// Applier holds one kind of resource.
type Applier interface {
	// Plan says what Apply would do (spec.Created, spec.Changed or
	// spec.Unchanged) and changes nothing.
	Plan(root string, r spec.Resource) (string, error)
	// Apply makes the machine hold r and says which of Created, Changed or
	// Unchanged it was.
	Apply(ctx context.Context, root string, r spec.Resource, blobs BlobFetcher, w *Writes) (string, error)
	// Remove removes what a was.
	Remove(root string, a Applied, w *Writes) error
}

// Writes counts the mutating filesystem calls an apply made (create, write,
// rename, chmod, chown, mkdir, remove).
type Writes struct{ N int }

// add counts one mutating call; a nil *Writes counts nothing.
func (w *Writes) add() {
	if w != nil {
		w.N++
	}
}

// Engine applies declarations under Root: a resource's path p is
// filepath.Join(Root, p), reached from Root without ever leaving it (see
// tree.locate: a link among p's parents is followed only while it stays
// under Root). Root is "/" in production.
type Engine struct {
	Root     string
	Blobs    BlobFetcher
	Appliers map[string]Applier // by kind; NewEngine fills file and directory
	// Panicked hears of a panic recovered in an applier, with its stack;
	// the resource fails with it. Nil: it is only that failure.
	Panicked func(what string, v any, stack []byte)
}

// NewEngine is an engine for files and directories under root, fetching blobs
// from blobs.
func NewEngine(root string, blobs BlobFetcher) *Engine {
	return &Engine{
		Root:  root,
		Blobs: blobs,
		Appliers: map[string]Applier{
			spec.KindFile:      fileApplier{},
			spec.KindDirectory: directoryApplier{},
		},
	}
}

// Containers has the engine hold containers and the node's network in the
// engine docker (nil: those resources fail with the reason), publishing
// ports on address and putting containers on subnet, whose gateway names
// (the machine's resolver) serves while the network is there. Nil names:
// names are not served to containers.
func (e *Engine) Containers(docker *Docker, node, address string, subnet netip.Prefix, names Names) {
	e.Appliers[spec.KindNetwork] = networkApplier{docker: docker, node: node, subnet: subnet, names: names}
	e.Appliers[spec.KindContainer] = containerApplier{docker: docker, node: node, address: address, subnet: subnet, running: &runningList{}, archives: &archiveIDs{}}
}

// Apply makes the machine hold exactly resources: it applies each (a
// resource that fails Check is Failed with its cause) and removes every
// resource in previous that is not declared any more (by name). One failure
// does not stop the others. It returns one result per declared resource (in
// apply order: parents first) and then one per removed resource (deepest
// first), the new record of what is applied, and how many mutating
// filesystem calls it made.
func (e *Engine) Apply(ctx context.Context, resources []spec.Resource, previous []Applied) ([]spec.ResourceResult, []Applied, int) {
	for _, ap := range e.Appliers {
		if p, ok := ap.(preparer); ok {
			p.prepare(ctx, resources)
			defer p.finish()
		}
	}
	var w Writes
	results := make([]spec.ResourceResult, 0, len(resources))
	record := make([]Applied, 0, len(resources))
	before := make(map[string]Applied, len(previous))
	for _, a := range previous {
		before[a.Name] = a
	}

	for _, r := range applyOrder(resources) {
		res := spec.ResourceResult{Name: r.Name, Kind: r.Kind}
		outcome, err := "", r.Check()
		wellFormed := err == nil
		if wellFormed {
			outcome, res.Note, err = e.applyChecked(ctx, r, &w)
		}
		if err != nil {
			res.Outcome, res.Error = spec.Failed, err.Error()
		} else {
			res.Outcome = outcome
		}
		results = append(results, res)

		switch {
		case err == nil:
			record = append(record, applied(r, r.Digest()))
		case wellFormed:
			// It may have created something before it failed: keep it on
			// record so that a declaration without it still removes it.
			record = append(record, applied(r, ""))
		default:
			// A malformed resource touched nothing; what an earlier
			// declaration applied under its name stays on record.
			if a, ok := before[r.Name]; ok {
				a.Digest = ""
				record = append(record, a)
			}
		}
	}

	var held []string // the paths declared, made when first needed
	for _, rm := range removals(resources, previous) {
		a := rm.Applied
		res := spec.ResourceResult{Name: a.Name, Kind: a.Kind, Outcome: spec.Removed}
		err := ctx.Err()
		if err != nil {
			err = fmt.Errorf("remove %s: %w", a.Path, err)
		} else if !rm.handedOver {
			if held == nil {
				held = heldPaths(resources)
			}
			res.Note, err = e.removeOne(a, held, &w)
		}
		if err != nil {
			res.Outcome, res.Error = spec.Failed, err.Error()
			record = append(record, a) // tried again next time
		}
		results = append(results, res)
	}
	return results, record, w.N
}

// Preview says what Apply would do, writing nothing: Created, Changed or
// Unchanged per resource (Failed with the cause where Apply would fail
// before writing), and Removed for each previous resource no longer
// declared.
func (e *Engine) Preview(resources []spec.Resource, previous []Applied) []spec.ResourceResult {
	results := make([]spec.ResourceResult, 0, len(resources))
	for _, r := range applyOrder(resources) {
		res := spec.ResourceResult{Name: r.Name, Kind: r.Kind}
		outcome, err := e.planOne(r)
		if err != nil {
			res.Outcome, res.Error = spec.Failed, err.Error()
		} else {
			res.Outcome = outcome
		}
		results = append(results, res)
	}
	for _, rm := range removals(resources, previous) {
		results = append(results, spec.ResourceResult{Name: rm.Name, Kind: rm.Kind, Outcome: spec.Removed})
	}
	return results
}

func (e *Engine) applier(kind string) (Applier, error) {
	ap, ok := e.Appliers[kind]
	if !ok || ap == nil {
		return nil, fmt.Errorf("no applier for kind %q", kind)
	}
	return ap, nil
}

// preparer is an Applier that reads what it holds once per apply (a
// container engine's listing) rather than once per resource.
type preparer interface {
	prepare(ctx context.Context, resources []spec.Resource)
	finish()
}

// noter is an Applier that can say more of a change than its outcome: a
// container started again, and why it had stopped.
type noter interface {
	apply(ctx context.Context, root string, r spec.Resource, blobs BlobFetcher, w *Writes) (note, outcome string, err error)
}

// applyChecked applies r, which passed Check.
func (e *Engine) applyChecked(ctx context.Context, r spec.Resource, w *Writes) (outcome, note string, err error) {
	defer e.recovered("apply "+r.Name, &err)
	if err := ctx.Err(); err != nil {
		return "", "", fmt.Errorf("apply %s: %w", r.Target(), err)
	}
	ap, err := e.applier(r.Kind)
	if err != nil {
		return "", "", err
	}
	if n, ok := ap.(noter); ok {
		note, outcome, err = n.apply(ctx, e.Root, r, e.Blobs, w)
		return outcome, note, err
	}
	outcome, err = ap.Apply(ctx, e.Root, r, e.Blobs, w)
	return outcome, "", err
}

func (e *Engine) planOne(r spec.Resource) (outcome string, err error) {
	defer e.recovered("plan "+r.Name, &err)
	if err := r.Check(); err != nil {
		return "", err
	}
	ap, err := e.applier(r.Kind)
	if err != nil {
		return "", err
	}
	return ap.Plan(e.Root, r)
}

// removeNoter is an Applier whose removal can leave something in place on
// purpose and say so (a directory that holds what nothing declared), and
// must never take what is still declared (held: the paths of the files and
// directories declared now).
type removeNoter interface {
	remove(root string, a Applied, held []string, w *Writes) (note string, err error)
}

func (e *Engine) removeOne(a Applied, held []string, w *Writes) (note string, err error) {
	defer e.recovered("remove "+a.Name, &err)
	ap, err := e.applier(a.Kind)
	if err != nil {
		return "", err
	}
	if n, ok := ap.(removeNoter); ok {
		return n.remove(e.Root, a, held, w)
	}
	return "", ap.Remove(e.Root, a, w)
}

// heldPaths are the paths of the well-formed files and directories among
// resources (never nil).
func heldPaths(resources []spec.Resource) []string {
	held := []string{}
	for _, r := range resources {
		if (r.Kind == spec.KindFile || r.Kind == spec.KindDirectory) && r.Check() == nil {
			held = append(held, r.Target())
		}
	}
	return held
}

// applyOrder is resources in the order they depend on each other: files
// and directories first (parents first: by path depth, a directory before a
// file at the same depth, then by path), then the network, then the
// containers that mount the one and join the other. The sort is stable, so
// resources that compare equal keep their declared order.
func applyOrder(resources []spec.Resource) []spec.Resource {
	out := slices.Clone(resources)
	slices.SortStableFunc(out, func(a, b spec.Resource) int {
		if d := phase(a.Kind) - phase(b.Kind); d != 0 {
			return d
		}
		if d := pathDepth(a.Target()) - pathDepth(b.Target()); d != 0 {
			return d
		}
		if d := kindRank(a.Kind) - kindRank(b.Kind); d != 0 {
			return d
		}
		return strings.Compare(a.Target(), b.Target())
	})
	return out
}

// removal is a previous resource no longer declared by its name.
type removal struct {
	Applied
	// handedOver: a resource of the same kind at the same path is declared
	// under another name (it moved from one module to another). The old name
	// goes from the record; what is on disk stays, for the new one holds it.
	handedOver bool
}

// removals is what previous holds that resources no longer declare (by
// name), in the reverse of the apply order: containers, then the network,
// then files and directories, deepest path first.
func removals(resources []spec.Resource, previous []Applied) []removal {
	declared := make(map[string]bool, len(resources))
	for _, r := range resources {
		declared[r.Name] = true
	}
	var out []removal
	var held map[[2]string]bool // kind and path of each well-formed resource, made when first needed
	for _, a := range previous {
		if declared[a.Name] {
			continue
		}
		if held == nil {
			held = make(map[[2]string]bool, len(resources))
			for _, r := range resources {
				if r.Check() == nil {
					held[[2]string{r.Kind, r.Target()}] = true
				}
			}
		}
		out = append(out, removal{Applied: a, handedOver: held[[2]string{a.Kind, a.Path}]})
	}
	slices.SortStableFunc(out, func(a, b removal) int {
		if d := phase(b.Kind) - phase(a.Kind); d != 0 {
			return d
		}
		if d := pathDepth(b.Path) - pathDepth(a.Path); d != 0 {
			return d
		}
		if d := kindRank(b.Kind) - kindRank(a.Kind); d != 0 {
			return d
		}
		return strings.Compare(b.Path, a.Path)
	})
	return out
}

// phase is when a kind is applied: what a later phase uses is held by an
// earlier one.
func phase(kind string) int {
	switch kind {
	case spec.KindNetwork:
		return 1
	case spec.KindContainer:
		return 2
	}
	return 0
}

func pathDepth(p string) int { return strings.Count(p, "/") }

func kindRank(kind string) int {
	switch kind {
	case spec.KindDirectory:
		return 0
	case spec.KindFile:
		return 1
	}
	return 2
}

// ownerIDs resolves a declared owner and group to ids; -1 stands for one
// that is not declared (not managed).
func ownerIDs(owner, group string) (uid, gid int, err error) {
	uid, gid = -1, -1
	if owner != "" {
		if uid, err = resolveID("owner", owner, func(name string) (string, error) {
			u, err := user.Lookup(name)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		}); err != nil {
			return -1, -1, err
		}
	}
	if group != "" {
		if gid, err = resolveID("group", group, func(name string) (string, error) {
			g, err := user.LookupGroup(name)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		}); err != nil {
			return -1, -1, err
		}
	}
	return uid, gid, nil
}

// resolveID takes a numeric string as the id itself and looks anything else
// up by name.
func resolveID(role, s string, lookup func(string) (string, error)) (int, error) {
	if id, err := strconv.ParseUint(s, 10, 32); err == nil {
		if id == 1<<32-1 {
			return -1, fmt.Errorf("%s %q is not a valid id (it means \"no change\" to chown)", role, s)
		}
		return int(id), nil
	}
	idText, err := lookup(s)
	if err != nil {
		return -1, fmt.Errorf("look up %s %q: %w", role, s, err)
	}
	id, err := strconv.ParseUint(idText, 10, 32)
	if err != nil {
		return -1, fmt.Errorf("look up %s %q: id %q is not numeric: %w", role, s, idText, err)
	}
	return int(id), nil
}

// what says what kind of thing a mode is, for messages.
func what(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "a regular file"
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFLNK:
		return "a symbolic link"
	case syscall.S_IFIFO:
		return "a named pipe"
	case syscall.S_IFSOCK:
		return "a socket"
	case syscall.S_IFCHR:
		return "a character device"
	case syscall.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("something of type %#o", mode&syscall.S_IFMT)
}

// permBits is the exact permission part of a stat mode, setuid, setgid and
// sticky included.
func permBits(st *unix.Stat_t) spec.Mode { return spec.Mode(st.Mode & 0o7777) }

// osMode is m as an os.FileMode, keeping setuid, setgid and sticky (which
// os.FileMode carries outside its permission bits).
func osMode(m spec.Mode) os.FileMode {
	fm := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// metaDrift says whether what st describes needs a chown or a chmod to have
// the declared mode and ids (-1: not managed).
func metaDrift(st *unix.Stat_t, mode spec.Mode, uid, gid int) (chown, chmod bool) {
	chown = (uid >= 0 && st.Uid != uint32(uid)) || (gid >= 0 && st.Gid != uint32(gid))
	return chown, permBits(st) != mode
}

// fixMeta chowns and chmods what is at s, which must be of kind (S_IFREG,
// S_IFDIR), in that order: a chown clears the setuid and setgid bits of a
// file, so the chmod comes after it whenever it runs. Both act on a
// descriptor of what is there, never through a link.
func fixMeta(s *spot, kind uint32, mode spec.Mode, uid, gid int, chown, chmod bool, w *Writes) error {
	if !chown && !chmod {
		return nil
	}
	step := "chmod"
	if chown {
		step = "chown"
	}
	fd, err := s.openMeta(kind)
	if err != nil {
		return fmt.Errorf("%s %s: %w", step, s.path, err)
	}
	defer unix.Close(fd)
	if chown {
		w.add()
		if err := chownFd(fd, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", s.path, err)
		}
		chmod = true
	}
	if chmod {
		w.add()
		if err := chmodFd(fd, uint32(mode&0o7777)); err != nil {
			return fmt.Errorf("chmod %s: %w", s.path, err)
		}
	}
	return nil
}

// locateRecorded is where a record's path lies under t, refusing a path
// that a well-formed resource could not have had. Nil with no error: nothing
// can be there (a parent is not a directory, or a link to what is missing).
func locateRecorded(t *tree, a Applied) (*spot, error) {
	if err := spec.CheckPath(a.Path); err != nil {
		return nil, fmt.Errorf("remove %s: %w", a.Name, err)
	}
	s, err := t.locate(a.Path)
	var gone *unreachableError
	if errors.As(err, &gone) {
		return nil, nil
	}
	return s, err
}
