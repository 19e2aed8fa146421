package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/lease"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// storeWrites are the methods of the controller's store that write: the
// rebuild test makes its rows with them, and compares every other method.
var storeWrites = []string{
	"AbortRoll", "AddCADomain", "AddNode", "AddToken", "Assign", "Audit", "BeginRemoval",
	"BeginRollStep", "BeginUpload", "ChangeSettings", "Close", "CollectBlobs", "CopyTo",
	"CreateMesh", "DisableOverlay", "DropUpload", "DropUploadsBefore", "EnableOverlay",
	"EndRollStep", "Enrol", "FinishRoll", "Hold", "KeepEdgeStorageKey", "MarkApplied",
	"PublishRelease", "PutBlob", "PutGrants", "PutUploadChunk", "Reassign", "RecordCert",
	"RecordDeclaration", "RecordDeclarations", "RecordFacts", "RecordHeartbeat",
	"RecordHeartbeats", "RecordOverlayState", "RecordReport", "RecordReports", "RecordRoster",
	"RegisterModules", "RemoveModule", "RemoveNode", "ResumeRoll", "RevokeToken",
	"RewriteSettings", "RotateGrants", "SetIntermediate", "StartRoll", "Sync", "TouchBlob",
	"Unassign",
}

// rebuildFixture is what populate wrote that the reads name.
type rebuildFixture struct {
	binDigest, binBlob, uploaded, partial string
	rolls                                 []int64
}

// storeReads are the reads of the controller's store, each with the
// arguments it is called with (after its context): every one is answered
// alike before the view is deleted and after it is rebuilt.
func storeReads(f rebuildFixture) map[string][][]any {
	nodes := []string{"alpha", "beta", "gamma", "nowhere"}
	one := func(args ...any) [][]any { return [][]any{args} }
	each := func(names []string) [][]any {
		var calls [][]any
		for _, n := range names {
			calls = append(calls, []any{n})
		}
		return calls
	}
	var blobCalls, chunkCalls, rollCalls [][]any
	for _, d := range []string{f.binBlob, f.uploaded, f.partial} {
		blobCalls = append(blobCalls, []any{d})
		chunkCalls = append(chunkCalls, []any{d, int64(1), int64(3)})
	}
	for _, id := range append(f.rolls, 99) {
		rollCalls = append(rollCalls, []any{id})
	}
	return map[string][][]any{
		// MeshStore
		"Mesh": one(), "Operators": one(), "EdgeStorageKey": one(),
		// NodeStore
		"Node": each(nodes), "Nodes": one(), "NodeKeys": one(), "NodeCount": one(), "NodesLeaving": one(), "NodesNamed": one(nodes),
		// TokenStore
		"Token": each([]string{"t-beta", "t-open", "t-revoked", "nowhere"}), "Tokens": one(), "OpenTokens": one(),
		// ModuleStore
		"Modules": one(), "Module": each([]string{"web", "db", "old"}),
		// AssignmentStore
		"Assignments": one(), "AssignmentsOf": each(nodes), "Assignment": {{"web", "beta"}, {"db", "alpha"}, {"db", "gamma"}},
		// BlobStore, UploadStore
		"HasBlob": blobCalls, "BlobSize": blobCalls, "Blob": blobCalls, "BlobChunk": chunkCalls, "UploadOf": blobCalls,
		// DeclarationStore
		"LastDeclaration": each(nodes), "DeclarationHeads": one(nodes), "LastReceived": each(nodes),
		// RosterStore
		"LastRoster": one(), "LastRosterSeq": one(),
		// ReportStore
		"LastReport": each(nodes), "FailedReports": one(),
		// CAStore
		"CADomains": one(), "Intermediate": one(), "Certs": {{int64(0), 100}, {int64(1), 1}}, "LatestCerts": one(),
		// ReleaseStore
		"Releases": one(int64(0), 100), "Release": each([]string{f.binDigest, "nowhere"}),
		// RollStore
		"ActiveRoll": one(), "RollByID": rollCalls, "NodeBinary": each(nodes), "NodeBinaries": one(),
		// GrantStore
		"Grants": one(),
		// AuditStore
		"AuditSince": {{time.Time{}, 1000}, {time.Date(2025, 1, 2, 3, 30, 0, 0, time.UTC), 2}},
		// OverlayStore
		"Overlay": one(), "OverlayReports": one(), "OverlayReportOf": each(nodes),
		// the view itself: the revision of the log it applied, its schema
		"Applied": one(), "Migrations": one(),
	}
}

// readAll is every answer of the reads of v, by the call that gave it.
func readAll(t *testing.T, v *journal.View, reads map[string][][]any) map[string][]any {
	t.Helper()
	ctx := reflect.ValueOf(t.Context())
	val := reflect.ValueOf(v)
	out := map[string][]any{}
	for name, calls := range reads {
		m := val.MethodByName(name)
		if !m.IsValid() {
			t.Fatalf("the store has no read %s", name)
		}
		some := false
		for _, args := range calls {
			in := []reflect.Value{ctx}
			for _, a := range args {
				in = append(in, reflect.ValueOf(a))
			}
			res := m.Call(in)
			var answer []any
			failed := false
			for _, r := range res {
				if err, ok := r.Interface().(error); ok && r.Type() == reflect.TypeFor[error]() {
					answer = append(answer, "error: "+err.Error())
					failed = true
					continue
				}
				answer = append(answer, r.Interface())
			}
			if !failed && !res[0].IsZero() {
				some = true
			}
			out[fmt.Sprintf("%s%v", name, args)] = answer
		}
		if !some {
			t.Errorf("no call of %s%v answers anything: the store holds no row it reads, and the comparison proves nothing", name, calls)
		}
	}
	return out
}

// Every read of the store (each method of the store the controller uses
// that is not a write) answers alike before a controller's view is
// deleted and after the view is rebuilt from the log at its next start:
// rebuilt from the snapshot the log began with and every entry after, and
// rebuilt from a snapshot of a compaction and the entries after it. A
// read added to the store and not to the reads compared here, or to the
// writes, fails the test.
func TestRebuiltViewAnswersEveryReadAlike(t *testing.T) {
	t.Parallel()
	checkReadsListed(t)
	for _, c := range []struct {
		name string
		cfg  journal.Config
	}{
		{"from the log's first snapshot", journal.Config{}},
		{"from a compaction's snapshot", journal.Config{CompactEntries: compactEntries, CompactEvery: time.Nanosecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "mesh")
			bus := testport.Addr(t, "127.0.0.1")
			if err := Create(t.Context(), Genesis{Dir: dir, Mesh: "home", Node: "alpha", Address: "127.0.0.1", Bus: bus}); err != nil {
				t.Fatal(err)
			}
			var f rebuildFixture
			var began uint64
			withJournal(t, dir, c.cfg, func(v *journal.View, js jetstream.JetStream) {
				began = newestSnapshot(t, js)
				f = populate(t, dir, v)
			})
			reads := storeReads(f)
			var want map[string][]any
			withJournal(t, dir, c.cfg, func(v *journal.View, js jetstream.JetStream) {
				if compacted := newestSnapshot(t, js) > began; compacted != (c.cfg.CompactEntries > 0) {
					t.Fatalf("the log compacted: %v, want %v", compacted, c.cfg.CompactEntries > 0)
				}
				want = readAll(t, v, reads)
			})
			deleteAndRebuild(t, dir, bus)
			var got map[string][]any
			withJournal(t, dir, c.cfg, func(v *journal.View, _ jetstream.JetStream) { got = readAll(t, v, reads) })
			for _, call := range slices.Sorted(maps.Keys(want)) {
				if !reflect.DeepEqual(got[call], want[call]) {
					t.Errorf("rebuilt, %s answers\n%+v\nwant\n%+v", call, got[call], want[call])
				}
			}
		})
	}
}

// newestSnapshot is the revision of the entry naming the log's newest
// snapshot.
func newestSnapshot(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	stream, err := js.Stream(t.Context(), "KV_"+journal.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(t.Context(), lease.Subject(journal.DefaultBucket, "w.snap.*"))
	if err != nil {
		t.Fatal(err)
	}
	return msg.Sequence
}

// checkReadsListed fails unless each method of the store the controller
// uses (the journal's view, which is the mesh's Store and more) is either
// a read compared after a rebuild or a write, and each name listed is a
// method of it.
func checkReadsListed(t *testing.T) {
	t.Helper()
	reads := storeReads(rebuildFixture{})
	view := reflect.TypeFor[*journal.View]()
	for i := range view.NumMethod() {
		name := view.Method(i).Name
		_, read := reads[name]
		if write := slices.Contains(storeWrites, name); read == write {
			t.Errorf("method %s of the store is listed as both a read and a write, or as neither: compare it after a rebuild (storeReads) or list it as a write (storeWrites)", name)
		}
	}
	for _, name := range append(slices.Collect(maps.Keys(reads)), storeWrites...) {
		if _, ok := view.MethodByName(name); !ok {
			t.Errorf("%s is listed but is no method of the store", name)
		}
	}
	meshStore := reflect.TypeFor[mesh.Store]()
	for i := range meshStore.NumMethod() {
		if _, ok := view.MethodByName(meshStore.Method(i).Name); !ok {
			t.Errorf("the journal's view lacks %s of mesh.Store", meshStore.Method(i).Name)
		}
	}
}

// deleteAndRebuild deletes the store of the mesh kept in dir and opens it
// as the controller does at its start, which rebuilds it from the log.
func deleteAndRebuild(t *testing.T, dir, bus string) {
	t.Helper()
	ctlDir := statedir.Controller(dir)
	path := filepath.Join(ctlDir, mesh.DBFile)
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	auth, err := ca.Load(filepath.Join(ctlDir, mesh.CADir))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := mesh.NewKeys()
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMesh(MeshConfig{Dir: dir, Addrs: spec.Addrs{Bus: bus, HTTP: "127.0.0.1:0"},
		Resolver: resolver.Config{Listen: []string{"127.0.0.1:0"}}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	db, err := m.openStore(t.Context(), nil, auth, keys)
	if err != nil {
		t.Fatalf("the store deleted is not rebuilt: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// rebuildAt is when the rows of the rebuild test were written.
var rebuildAt = time.Date(2025, 1, 2, 3, 4, 5, 600, time.UTC)

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// populate writes, through the log, a row of every concern of the store of
// the mesh kept in dir, and says what the reads name.
func populate(t *testing.T, dir string, v *journal.View) rebuildFixture {
	t.Helper()
	ctx, at := t.Context(), rebuildAt
	_, err := v.KeepEdgeStorageKey(ctx, seal.TextPrefix+"edge", at)
	must(t, err)
	_, err = v.EnableOverlay(ctx, netip.MustParsePrefix("100.96.0.0/16"), at)
	must(t, err)
	populateNodes(t, v)
	restKey, err := seal.LoadRestKey(filepath.Join(statedir.Controller(dir), mesh.SealKeyFile))
	must(t, err)
	populateModules(t, v, restKey)
	populateRecords(t, v)
	f := populateBlobs(t, v)
	f.rolls = populateRolls(t, v, f.binDigest)
	must(t, v.AddCADomain(ctx, "example.org", at))
	must(t, v.SetIntermediate(ctx, store.Intermediate{Serial: "1f", CertPEM: "-----BEGIN CERTIFICATE-----", KeySealed: seal.TextPrefix + "key", Set: at}, "corp.example"))
	for i, names := range [][]string{{"web.beta.internal"}, {"web.beta.internal", "api.beta.internal"}} {
		must(t, v.RecordCert(ctx, store.Cert{Serial: fmt.Sprint("s", i), Node: "beta", Names: names,
			NotAfter: at.Add(24 * time.Hour), Issued: at.Add(time.Duration(i) * time.Minute)}))
	}
	must(t, v.Audit(ctx, store.AuditEntry{At: at, Operator: "operator", Verb: "assign", Args: `{"module":"web"}`, Outcome: "ok"}))
	must(t, v.Audit(ctx, store.AuditEntry{At: at.Add(time.Hour), Operator: "operator", Verb: "remove", Args: "{}", Outcome: "refused"}))
	return f
}

// populateNodes enrols beta, gamma and delta (removed), each with its
// token, and records what hosts report of them.
func populateNodes(t *testing.T, v *journal.View) {
	t.Helper()
	ctx, at := t.Context(), rebuildAt
	for _, name := range []string{"beta", "gamma", "delta"} {
		must(t, v.AddToken(ctx, store.Token{ID: "t-" + name, Node: name, EnrolNKey: "UENROL" + name, Created: at, Expires: at.Add(time.Hour)}))
		must(t, v.Enrol(ctx, "t-"+name, store.Node{Name: name, Address: "10.0.0." + fmt.Sprint(len(name)), NKey: "U" + strings.ToUpper(name),
			SealKey: "seal-" + name, WGKey: "wg-" + name, Joined: at.Add(time.Minute)}))
	}
	must(t, v.AddToken(ctx, store.Token{ID: "t-open", Node: "epsilon", EnrolNKey: "UEPS", Created: at, Expires: at.Add(48 * time.Hour), Controller: true}))
	must(t, v.AddToken(ctx, store.Token{ID: "t-revoked", Node: "zeta", EnrolNKey: "UZETA", Created: at, Expires: at.Add(time.Hour)}))
	must(t, v.RevokeToken(ctx, "t-revoked", at.Add(time.Second)))
	must(t, v.RemoveNode(ctx, "delta"))
	must(t, v.RecordHeartbeat(ctx, spec.Heartbeat{Node: "beta", Time: at, AppliedSeq: 1, HostVersion: "abc123", Protocol: 7,
		IntervalMS: 5000, RosterSeq: 1, Fallbacks: []spec.Fallback{{Digest: "def456", Reason: "exited", At: at, Retry: 1}}}, at.Add(2*time.Minute)))
	failed, err := v.RecordHeartbeats(ctx, []spec.Heartbeat{{Node: "gamma", Time: at, HostVersion: "abc123", Protocol: 7}, {Node: "nowhere"}}, at.Add(3*time.Minute))
	must(t, err)
	if len(failed) != 1 {
		t.Fatalf("heartbeats failed: %v, want nowhere's", failed)
	}
	must(t, v.RecordFacts(ctx, spec.Facts{Node: "beta", Time: at, Arch: "amd64", OS: "linux", Kernel: "6.1", Cores: 2, MemoryBytes: 1 << 30, Hostname: "beta"}, at))
	must(t, v.Hold(ctx, "beta", at, "disk check"))
	must(t, v.BeginRemoval(ctx, "gamma", at.Add(time.Hour)))
	_, err = v.RecordOverlayState(ctx, spec.OverlayState{Node: "beta", Time: at, Mode: "kernel", Endpoints: []string{"192.0.2.1:51820"}, Relay: true,
		Peers: []spec.OverlayPath{{Node: "alpha", Handshake: at, Endpoint: "192.0.2.2:51820"}}}, at)
	must(t, err)
}

// populateModules registers web (a secret setting, a grant consumed), db
// (the grant's provider) and old (removed), and assigns them.
func populateModules(t *testing.T, v *journal.View, restKey *seal.RestKey) {
	t.Helper()
	ctx, at := t.Context(), rebuildAt
	def := "8080"
	web := spec.Module{Name: "web", Version: "2", Description: "the site",
		Settings: []spec.Setting{{Name: "port", Type: "int", Default: &def}, {Name: "password", Type: "string", Secret: true}, {Name: "db_user", Type: "string"}, {Name: "db_password", Type: "string", Secret: true}},
		Routes:   []spec.Route{{Name: "web", Port: 8080, Public: []string{"www.example.org"}, TLS: true}},
		Consumes: []spec.Consume{{Grant: "sql", User: "db_user", Password: "db_password"}},
		Resources: []spec.Resource{{Name: spec.ResourceName("web", spec.KindFile, "/etc/web"), Kind: spec.KindFile, Module: "web",
			Spec: &spec.FileSpec{Path: "/etc/web", Mode: 0o644, Content: []byte("site"), Size: 4, Digest: spec.ContentDigest([]byte("site"))}}}}
	db := spec.Module{Name: "db", Version: "1", Routes: []spec.Route{{Name: "sql", Port: 5432}},
		Provides: []spec.Provide{{Grant: "sql", Route: "sql", File: spec.ProvideFile{Path: "/etc/db/users"}}}}
	old := spec.Module{Name: "old", Version: "1"}
	_, err := v.RegisterModules(ctx, []spec.Module{web, db, old}, at)
	must(t, err)
	_, err = v.RemoveModule(ctx, "old")
	must(t, err)
	password := restKey.SealText("hunter2", seal.Place("assignment", "web", "beta", "password"))
	must(t, v.Assign(ctx, "web", "beta", map[string]string{"port": "8081", "password": password, "stale": "x"}, at))
	must(t, v.Reassign(ctx, "web", "beta", map[string]string{"port": "8082"}, []string{"stale"}, at.Add(time.Minute)))
	must(t, v.Assign(ctx, "db", "alpha", nil, at))
	must(t, v.Assign(ctx, "db", "gamma", map[string]string{"x": "1"}, at))
	must(t, v.Unassign(ctx, "db", "gamma"))
	_, err = v.RewriteSettings(ctx, []string{"web"}, func(a store.Assignment, _ spec.Module) (map[string]string, bool, error) {
		to := map[string]string{"db_user": "web.beta"}
		for k, val := range a.Settings {
			to[k] = val
		}
		return to, true, nil
	})
	must(t, err)
	must(t, v.PutGrants(ctx, []store.Grant{{Module: "web", Node: "beta", Grant: "sql", Provider: "db", Credential: seal.TextPrefix + "cred1", MintedAt: at}}))
	must(t, v.RotateGrants(ctx, "web", "beta", map[string]string{"sql": seal.TextPrefix + "cred2"}, at.Add(time.Hour)))
}

// populateRecords records declarations sent to beta and gamma, their
// reports (gamma's failed), and a roster.
func populateRecords(t *testing.T, v *journal.View) {
	t.Helper()
	ctx, at := t.Context(), rebuildAt
	var ds []store.Declaration
	for _, n := range []string{"alpha", "beta", "gamma"} {
		body := []byte(`{"node":"` + n + `","seq":1}`)
		ds = append(ds, store.Declaration{Node: n, Seq: 1, Body: body, Sig: []byte("sig-" + n), Content: spec.ContentDigest(body), Sent: at, Expires: at.Add(time.Hour)})
	}
	failed, err := v.RecordDeclarations(ctx, ds)
	must(t, err)
	if len(failed) > 0 {
		t.Fatalf("declarations refused: %v", failed)
	}
	reports, err := v.RecordReports(ctx, []store.ReportRecord{
		{Report: store.Report{Node: "beta", Seq: 1, Body: []byte(`{"ok":true}`), Received: at.Add(time.Second)}, Applied: true},
		{Report: store.Report{Node: "gamma", Seq: 1, Body: []byte(`{"ok":false}`), Received: at.Add(time.Second)}, Failed: true},
	})
	must(t, err)
	if len(reports) > 0 {
		t.Fatalf("reports refused: %v", reports)
	}
	roster := []byte(`{"seq":1}`)
	must(t, v.RecordRoster(ctx, store.Roster{Seq: 1, Body: roster, Sig: []byte("sig"), Content: spec.ContentDigest(roster), Sent: at, Expires: at.Add(time.Hour)}))
}

// populateBlobs stores a release's binary, a blob uploaded whole, one
// under way, and one collected; and publishes the release.
func populateBlobs(t *testing.T, v *journal.View) rebuildFixture {
	t.Helper()
	ctx, at := t.Context(), rebuildAt
	bin := []byte("the binary of a release")
	sum := sha256.Sum256(bin)
	f := rebuildFixture{binDigest: hex.EncodeToString(sum[:]), binBlob: spec.ContentDigest(bin)}
	must(t, v.PutBlob(ctx, f.binBlob, bin, at))
	_, err := v.PublishRelease(ctx, store.Release{Digest: f.binDigest, GOOS: "linux", GOARCH: "amd64", Go: "go1.24", Size: int64(len(bin)), Published: at})
	must(t, err)

	whole, partial, gone := []byte("uploaded whole"), []byte("uploaded in part"), []byte("nothing holds it")
	f.uploaded, f.partial = spec.ContentDigest(whole), spec.ContentDigest(partial)
	for _, b := range [][]byte{whole, partial} {
		_, err := v.BeginUpload(ctx, spec.ContentDigest(b), int64(len(b)), at)
		must(t, err)
	}
	must(t, v.PutUploadChunk(ctx, f.uploaded, 0, whole[:5], []byte("h1"), false, at))
	must(t, v.PutUploadChunk(ctx, f.uploaded, 5, whole[5:], nil, true, at.Add(time.Second)))
	must(t, v.PutUploadChunk(ctx, f.partial, 0, partial[:8], []byte("h2"), false, at.Add(time.Second)))
	_, err = v.TouchBlob(ctx, f.uploaded, at.Add(time.Hour))
	must(t, err)
	must(t, v.PutBlob(ctx, spec.ContentDigest(gone), gone, at.Add(-48*time.Hour)))
	collected, err := v.CollectBlobs(ctx, at.Add(-time.Hour), at)
	must(t, err)
	if len(collected) != 1 {
		t.Fatalf("collected %v, want the blob nothing holds", collected)
	}
	return f
}

// populateRolls rolls the release to alpha (done), then starts a roll to
// beta and gamma left running, beta sent and healthy; it returns their
// ids.
func populateRolls(t *testing.T, v *journal.View, digest string) []int64 {
	t.Helper()
	ctx, at := t.Context(), rebuildAt
	first, err := v.StartRoll(ctx, store.Roll{Digest: digest, HealthyWithin: time.Minute, Started: at, Nodes: []store.RollNode{{Node: "alpha"}}})
	must(t, err)
	must(t, v.BeginRollStep(ctx, first.ID, 0, at))
	must(t, v.EndRollStep(ctx, first.ID, 0, spec.RollHealthy, "", at.Add(time.Second)))
	must(t, v.FinishRoll(ctx, first.ID, at.Add(time.Second)))
	second, err := v.StartRoll(ctx, store.Roll{Digest: digest, HealthyWithin: 2 * time.Minute, Started: at.Add(time.Hour),
		Nodes: []store.RollNode{{Node: "beta"}, {Node: "gamma"}}})
	must(t, err)
	must(t, v.BeginRollStep(ctx, second.ID, 0, at.Add(time.Hour)))
	must(t, v.EndRollStep(ctx, second.ID, 0, spec.RollHealthy, "", at.Add(time.Hour+time.Second)))
	return []int64{first.ID, second.ID}
}
