package mesh

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// vaultModule declares a secret setting, token, and a plain one, who, and
// writes both into one file.
func vaultModule() spec.Module {
	m := dirModule("vault", "/srv/vault")
	content := []byte("token=${token} who=${who}")
	m.Resources = append(m.Resources, spec.Resource{Name: spec.ResourceName("vault", spec.KindFile, "/srv/vault/env"),
		Kind: spec.KindFile, Module: "vault",
		Spec: &spec.FileSpec{Path: "/srv/vault/env", Mode: 0o600, Content: content, Size: int64(len(content)), Digest: spec.ContentDigest(content)}})
	m.Settings = []spec.Setting{{Name: "token", Type: spec.TypeString, Secret: true}, {Name: "who", Type: spec.TypeString}}
	return m
}

// distinct is a value no other test writes: found in a file, it was
// written there by this test.
func distinct(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// fileContent is the content of the file at path in node's composed plan.
func fileContent(t *testing.T, c *Controller, node, path string) string {
	t.Helper()
	plan, own, err := c.modules.composeByName(context.Background(), node)
	if err != nil || own != nil {
		t.Fatalf("compose %s: %v %v", node, err, own)
	}
	for _, r := range plan.Resources {
		if f, ok := r.Spec.(*spec.FileSpec); ok && f.Path == path {
			if f.Sealed == "" {
				return string(f.Content)
			}
			content, err := alphaSealKey.Open(f.Sealed)
			if err != nil || node != "alpha" {
				t.Fatalf("%s's %s does not open with alpha's key: %v", node, path, err)
			}
			return string(content)
		}
	}
	t.Fatalf("%s composes no file %s: %+v", node, path, plan.Resources)
	return ""
}

// rawSetting is the setting as the store holds it, unopened.
func rawSetting(t *testing.T, db *store.DB, module, node, name string) string {
	t.Helper()
	as, err := db.AssignmentsOf(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Module == module {
			return a.Settings[name]
		}
	}
	t.Fatalf("%s is not assigned to %s", module, node)
	return ""
}

// TestSecretSettingsSealedAtRest: a secret setting's value is in neither
// mesh.db, its write-ahead log nor a snapshot of it (VACUUM INTO, as the
// launcher takes one), while a plain setting's is; the composed
// declaration carries the value where the module uses it.
func TestSecretSettingsSealedAtRest(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	secret, plain := distinct("SuperSecret-"), distinct("PlainValue-")
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha",
		Settings: map[string]string{"token": secret, "who": plain}}); err != nil {
		t.Fatal(err)
	}
	if raw := rawSetting(t, db, "vault", "alpha", "token"); !seal.IsSealedText(raw) {
		t.Errorf("the store holds the secret as %q, want it sealed", raw)
	}
	if raw := rawSetting(t, db, "vault", "alpha", "who"); raw != plain {
		t.Errorf("the store holds the plain setting as %q, want %q", raw, plain)
	}
	if got, want := fileContent(t, c, "alpha", "/srv/vault/env"), "token="+secret+" who="+plain; got != want {
		t.Errorf("composed content %q, want %q", got, want)
	}

	dir, _ := controllerDirs.Load(c)
	path := filepath.Join(dir.(string), DBFile)
	snap := filepath.Join(t.TempDir(), "mesh.db.before-test")
	if err := store.Snapshot(ctx, path, snap); err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, p := range []string{path, path + "-wal", snap} {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret value in plain", filepath.Base(p))
		}
		all = append(all, b...)
	}
	if !bytes.Contains(all, []byte(plain)) {
		t.Fatal("the plain setting is in none of the files read: the test reads the wrong files")
	}
}

// TestSealedSettingOpensOnlyInItsPlace: a sealed value copied into another
// node's row, or another setting's, does not open there: composing that
// node fails naming the setting, and the value is not composed.
func TestSealedSettingOpensOnlyInItsPlace(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "127.0.0.9", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	secret := distinct("SuperSecret-")
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha", Settings: map[string]string{"token": secret}}); err != nil {
		t.Fatal(err)
	}
	sealed := rawSetting(t, db, "vault", "alpha", "token")
	for _, moved := range []map[string]string{{"token": sealed}, {"token": "x", "who": sealed}} {
		if err := db.Assign(ctx, "vault", "beta", moved, clk.Now()); err != nil {
			t.Fatal(err)
		}
		_, _, err := c.modules.composeByName(ctx, "beta")
		if err == nil || !strings.Contains(err.Error(), `of module vault on node beta`) || strings.Contains(err.Error(), secret) {
			t.Errorf("composing beta with %v copied from alpha: %v, want a refusal naming the setting", moved, err)
		}
	}
	if got := fileContent(t, c, "alpha", "/srv/vault/env"); !strings.Contains(got, secret) {
		t.Errorf("alpha composes %q, want its own secret", got)
	}
}

// TestStartSealsPlainSecrets: a secret written plain (a store from before
// values were sealed) is sealed when the controller starts, and a setting
// a module's new version makes secret is sealed when it is registered;
// both still compose to their values. A plain setting whose value reads as
// sealed text is kept as it was given.
func TestStartSealsPlainSecrets(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	secret, who := distinct("SuperSecret-"), distinct("Who-")
	if err := db.Assign(ctx, "vault", "alpha", map[string]string{"token": secret, "who": who}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	c = restartController(t, c)
	if raw := rawSetting(t, db, "vault", "alpha", "token"); !seal.IsSealedText(raw) {
		t.Errorf("after the start, the store holds the secret as %q, want it sealed", raw)
	}
	if raw := rawSetting(t, db, "vault", "alpha", "who"); raw != who {
		t.Errorf("after the start, the plain setting reads %q, want %q", raw, who)
	}

	v2 := vaultModule()
	v2.Version, v2.Settings[1].Secret = "2", true
	if _, err := c.deps.DB.RegisterModules(ctx, []spec.Module{v2}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if raw := rawSetting(t, db, "vault", "alpha", "who"); !seal.IsSealedText(raw) {
		t.Errorf("a setting made secret by a new version is held as %q, want it sealed", raw)
	}
	if got, want := fileContent(t, c, "alpha", "/srv/vault/env"), "token="+secret+" who="+who; got != want {
		t.Errorf("composed content %q, want %q", got, want)
	}

	looks := seal.TextPrefix + "not-sealed"
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha", Settings: map[string]string{"token": secret, "who": looks}}); err != nil {
		t.Fatal(err)
	}
	if got, want := fileContent(t, c, "alpha", "/srv/vault/env"), "token="+secret+" who="+looks; got != want {
		t.Errorf("composed content %q, want %q", got, want)
	}
}

// TestLoadSealKeyForAnOlderMesh: a controller's directory without an
// at-rest key gets one, unless its store holds sealed values (the key
// that sealed them is lost), which is refused saying what to do.
func TestLoadSealKeyForAnOlderMesh(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	dir, _ := controllerDirs.Load(c)
	ctlDir := dir.(string)
	keyPath := filepath.Join(ctlDir, SealKeyFile)
	if info, err := os.Stat(keyPath); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("genesis made no at-rest key readable by its owner only: %v %v", info, err)
	}
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	if _, created, err := LoadSealKey(ctx, ctlDir, db); err != nil || !created {
		t.Fatalf("a store with no sealed value: created %v, %v; want a key made", created, err)
	}
	if _, created, err := LoadSealKey(ctx, ctlDir, db); err != nil || created {
		t.Fatalf("a key there already: created %v, %v; want it loaded", created, err)
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha", Settings: map[string]string{"token": "s"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadSealKey(ctx, ctlDir, db)
	if err == nil || !strings.Contains(err.Error(), "put the controller's seal.key back") {
		t.Fatalf("a store with sealed values and no key: %v, want a refusal saying what to do", err)
	}
	if _, err := os.Stat(keyPath); !os.IsNotExist(err) {
		t.Errorf("a key was made where the lost one belongs: %v", err)
	}
}

// TestLoadSealKeyRefusesAnySealedValue: with the at-rest key missing, a
// store that keeps no sealed setting but another value sealed under the
// lost key (a grant's credential, the CA intermediate's key) is refused
// too, naming the file, the value and what to do, and no key is made.
func TestLoadSealKeyRefusesAnySealedValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		keep func(ctx context.Context, c *Controller, db *store.DB) error
		want string
	}{
		{"grant", func(ctx context.Context, c *Controller, db *store.DB) error {
			// A grant goes with its consumer's assignment: one of no
			// settings.
			if _, err := db.RegisterModules(ctx, []spec.Module{dirModule("app", "/srv/app")}, time.Now()); err != nil {
				return err
			}
			if err := db.Assign(ctx, "app", "alpha", nil, time.Now()); err != nil {
				return err
			}
			return c.sealed.PutGrants(ctx, []store.Grant{{Module: "app", Node: "alpha", Grant: "db", Provider: "alpha", Credential: "s3cret", MintedAt: time.Now()}})
		}, `the credential of grant "db" of module app on node alpha`},
		{"intermediate", func(ctx context.Context, c *Controller, db *store.DB) error {
			return db.SetIntermediate(ctx, store.Intermediate{Serial: "1f", CertPEM: "cert",
				KeySealed: c.cfg.SealKey.SealText("key", intermediatePlace), Set: time.Now()}, "")
		}, "the key of the CA's intermediate 1f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, db := newController(t, &clock{now: time.Now()})
			ctx := context.Background()
			dir, _ := controllerDirs.Load(c)
			ctlDir := dir.(string)
			keyPath := filepath.Join(ctlDir, SealKeyFile)
			if err := tc.keep(ctx, c, db); err != nil {
				t.Fatal(err)
			}
			as, err := db.Assignments(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range as {
				if len(a.Settings) != 0 {
					t.Fatalf("assignment %+v holds settings; want none", a)
				}
			}
			if err := os.Remove(keyPath); err != nil {
				t.Fatal(err)
			}
			_, _, err = LoadSealKey(ctx, ctlDir, db)
			for _, want := range []string{keyPath + " is missing", tc.want, "put the controller's seal.key back from its backup"} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("a store with a sealed %s and no key: %v, want a refusal saying %q", tc.name, err, want)
				}
			}
			if _, err := os.Stat(keyPath); !os.IsNotExist(err) {
				t.Errorf("a key was made where the lost one belongs: %v", err)
			}
		})
	}
}
