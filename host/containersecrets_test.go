package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
)

// sealedSecret is a secret of setting at target whose value is sealed to
// pub, under a digest of its own.
func sealedSecret(t *testing.T, pub seal.NodePublic, setting, target, value string) spec.SecretMount {
	t.Helper()
	text, err := seal.SealTo(pub, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(target + "\x00" + value))
	return spec.SecretMount{Setting: setting, Target: target, Sealed: text, Digest: spec.SealedDigestPrefix + hex.EncodeToString(sum[:])}
}

// TestContainerSecretRefused: a container whose secret came unsealed, or
// reaches a host with no sealing key or no runtime directory, fails saying
// so, before the engine is asked anything.
func TestContainerSecretRefused(t *testing.T) {
	t.Parallel()
	key, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	sealed := sealedSecret(t, key.Public(), "token", "/run/secrets/token", "s3cret")
	unsealed := spec.SecretMount{Setting: "token", Target: "/run/secrets/token"}
	runtime := t.TempDir()
	ctr := func(m spec.SecretMount) spec.Resource {
		c := spec.ContainerSpec{Name: "app", Image: "example/app:1", Secrets: []spec.SecretMount{m}}
		return spec.Resource{Name: spec.ResourceName("m", spec.KindContainer, "app"), Kind: spec.KindContainer, Module: "m", Spec: &c}
	}
	for _, tc := range []struct {
		name string
		s    host.Services
		m    spec.SecretMount
		want string
	}{
		{"unsealed", host.Services{Root: t.TempDir(), SealKey: key, Runtime: runtime}, unsealed, "came unsealed"},
		{"no sealing key", host.Services{Root: t.TempDir(), Runtime: runtime}, sealed, "keeps no sealing key"},
		{"no runtime directory", host.Services{Root: t.TempDir(), SealKey: key}, sealed, "no runtime directory"},
	} {
		results, _, _ := host.NewEngine(tc.s).Apply(context.Background(), []spec.Resource{ctr(tc.m)}, nil)
		if len(results) != 1 || results[0].Outcome != spec.Failed || !strings.Contains(results[0].Error, tc.want) {
			t.Errorf("%s: %+v, want failed saying %q", tc.name, results, tc.want)
		}
	}
	if entries, _ := os.ReadDir(runtime); len(entries) > 0 {
		t.Errorf("a refused secret left %v in the runtime directory", entries)
	}
}

// TestContainerSecretOnTmpfs: a container's sealed secret is opened and
// written to a file on a tmpfs of the container's own, mode 0444, bound
// read-only at its target, where the container reads it; docker inspect
// shows the file's path and never the value. The same declaration again
// changes nothing; a new value replaces the container and its file; one
// stopped whose tmpfs is gone (as after a restart) is started again with
// its secret written anew; a container no longer declared takes its secrets with it, tmpfs and all.
func TestContainerSecretOnTmpfs(t *testing.T) {
	t.Parallel()
	needRoot(t, "a container's secret on a tmpfs")
	r := newEngineRig(t)
	ctx := context.Background()
	key, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(t.TempDir(), host.RuntimeDir)
	name := spec.ContainerName(r.node, "app")
	dir := filepath.Join(runtime, "secrets", name)
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) }) // before the temporary directory goes, should the test fail
	e := host.NewEngine(host.Services{Root: r.root, Blobs: r.blobs, Docker: r.docker, Node: r.node, Address: "127.0.0.1", Subnet: r.subnet,
		SealKey: key, Runtime: runtime})
	if err := os.MkdirAll(filepath.Join(r.root, "srv/out"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(r.root, "srv/out/got")
	declare := func(value string) []spec.Resource {
		app := spec.ContainerSpec{Name: "app", Restart: "no", Command: []string{"/bin/sh", "-c", "cat /run/secrets/db_password > /out/got && exec /bin/httpd -f -p 8080 -h /www"},
			Mounts:  []spec.MountSpec{{Source: "/srv/out", Target: "/out"}},
			Secrets: []spec.SecretMount{sealedSecret(t, key.Public(), "db_password", "/run/secrets/db_password", value)}}
		return []spec.Resource{r.network(), r.container(app)}
	}
	file := filepath.Join(dir, "0-db_password")
	// holds checks that the host's file holds value on a tmpfs, mode 0444,
	// and that the container read it at its target.
	holds := func(value string) {
		t.Helper()
		var fs unix.Statfs_t
		if err := unix.Statfs(file, &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
			t.Errorf("the secret's file %s: filesystem %#x, %v; want a tmpfs (%#x)", file, fs.Type, err, unix.TMPFS_MAGIC)
		}
		if st, err := os.Lstat(file); err != nil || st.Mode() != 0o444 {
			t.Errorf("the secret's file: %v, %v; want a regular file, mode 0444", st.Mode(), err)
		}
		if got, err := os.ReadFile(file); err != nil || string(got) != value {
			t.Errorf("the secret's file holds %q, %v; want the value", got, err)
		}
		poll.Until(t, 30*time.Second, "the container wrote out its secret", func() error {
			got, err := os.ReadFile(out)
			if err == nil && string(got) == value {
				return nil
			}
			return errors.New("it wrote " + string(got))
		})
	}
	// inspected checks that docker inspect shows the secret's path, bound
	// read-only, and never its value.
	inspected := func(value string) string {
		t.Helper()
		res, ok := r.inspect("app")
		if !ok {
			t.Fatal("container app is not there")
		}
		if bytes.Contains(res.Raw, []byte(value)) {
			t.Errorf("docker inspect shows the secret's value")
		}
		found := false
		for _, m := range res.Container.Mounts {
			if m.Destination == "/run/secrets/db_password" {
				found = true
				if m.Source != file || m.RW {
					t.Errorf("the secret's mount: source %s, read-write %v; want %s read-only", m.Source, m.RW, file)
				}
			}
		}
		if !found {
			t.Errorf("container app has no mount at /run/secrets/db_password: %+v", res.Container.Mounts)
		}
		return res.Container.ID
	}

	first := "pw-" + r.node + "-first"
	declared := declare(first)
	results, record, _ := e.Apply(ctx, declared, nil)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	holds(first)
	firstID := inspected(first)

	results, record, _ = e.Apply(ctx, declared, record)
	checkOutcomes(t, results, allOutcome(declared, spec.Unchanged))

	second := "pw-" + r.node + "-second"
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	declared = declare(second)
	results, record, _ = e.Apply(ctx, declared, record)
	checkOutcomes(t, results, map[string]string{declared[0].Name: spec.Unchanged, declared[1].Name: spec.Changed})
	holds(second)
	secondID := inspected(second)
	if secondID == firstID {
		t.Error("a new value kept the container: it was not replaced")
	}

	// As after the machine restarted: the container stopped, its tmpfs
	// gone. Started again, its secret written anew first.
	if _, err := r.cli.ContainerKill(ctx, secondID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	r.waitStopped("app")
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	results, record, _ = e.Apply(ctx, declared, record)
	if res := resultOf(t, results, declared[1].Name); res.Outcome != spec.Changed || !strings.Contains(res.Note, "started again") {
		t.Errorf("a stopped container whose tmpfs is gone: %+v, want started again", res)
	}
	holds(second)

	results, _, _ = e.Apply(ctx, nil, record)
	checkOutcomes(t, results, allOutcome(declared, spec.Removed))
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the container's secrets are still at %s (%v) after it was removed", dir, err)
	}
}
