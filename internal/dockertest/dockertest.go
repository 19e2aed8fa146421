// Package dockertest is what tests that need a Docker Engine share: a client
// that skips unless the engine is asked for (MESH_TEST_DOCKER=1, as CI sets
// it), and images built FROM scratch around the machine's static busybox,
// because no registry is reachable where the tests run.
//
// It is test support only: no package outside tests imports it.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

// EnvOptIn is the environment variable that asks for the tests needing a
// Docker Engine: "1" runs them (and an engine that does not answer fails
// them); anything else skips them.
const EnvOptIn = "MESH_TEST_DOCKER"

// Busybox is the static busybox copied into every image Build makes.
const Busybox = "/bin/busybox"

// Applets are the busybox applets Build links in /bin.
var Applets = []string{"sh", "httpd", "nslookup", "wget", "nc", "base64", "sleep", "cat", "echo"}

// timeout bounds each engine call a helper makes.
const timeout = 2 * time.Minute

// Client is a client of the Docker Engine the environment names (DOCKER_HOST,
// or the local socket), closed when the test ends. Without MESH_TEST_DOCKER=1
// the test is skipped; with it, an engine that does not answer a ping within
// 10 s fails the test.
func Client(t testing.TB) *client.Client {
	t.Helper()
	if os.Getenv(EnvOptIn) != "1" {
		t.Skip("needs a Docker engine: set " + EnvOptIn + "=1 (CI does)")
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatalf("%s=1 but no Docker client: %v", EnvOptIn, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		t.Fatalf("%s=1 but the Docker engine at %s does not answer: %v", EnvOptIn, cli.DaemonHost(), err)
	}
	return cli
}

// Build builds an image tagged tag FROM scratch: /bin/busybox (the
// machine's), the Applets as symlinks to it, and each of files (path in the
// image → content; mode 0755 under /bin or for a name ending in .sh, 0644
// otherwise). cmd, if given, is its CMD. The image is removed when the test
// ends.
//
// The build context is made in memory and sent through the Engine API to
// the classic builder: an image with no shell cannot RUN, so everything is
// laid out in the context and copied in one COPY, symlinks included.
func Build(t testing.TB, cli *client.Client, tag string, files map[string]string, cmd ...string) {
	t.Helper()
	// Registered first so that a build that fails half way is cleaned too.
	t.Cleanup(func() { remove(t, cli, tag) })
	if err := BuildImage(cli, tag, files, cmd...); err != nil {
		t.Fatal(err)
	}
}

// BuildImage is Build for a caller with no test, such as a TestMain that
// builds an image every test shares: it removes nothing (RemoveImage does).
func BuildImage(cli *client.Client, tag string, files map[string]string, cmd ...string) error {
	buildContext, err := buildContext(files, cmd)
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := cli.ImageBuild(ctx, bytes.NewReader(buildContext), client.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		// BuildKit needs a session the API alone does not give; the classic
		// builder needs nothing but the context.
		Version: build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	defer func() { _ = res.Body.Close() }()
	if err := ReadStream(res.Body); err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	return nil
}

// buildContext is the tar of a Dockerfile and the rootfs/ tree it copies.
func buildContext(files map[string]string, cmd []string) ([]byte, error) {
	dockerfile := "FROM scratch\nCOPY rootfs/ /\n"
	if len(cmd) > 0 {
		b, err := json.Marshal(cmd)
		if err != nil {
			return nil, err
		}
		dockerfile += "CMD " + string(b) + "\n"
	}
	bb, err := os.ReadFile(Busybox)
	if err != nil {
		return nil, fmt.Errorf("the image's busybox: %w", err)
	}

	type entry struct {
		content []byte
		link    string // a symlink's target, or ""
		mode    int64
	}
	tree := map[string]entry{"bin/busybox": {content: bb, mode: 0o755}}
	for _, a := range Applets {
		tree["bin/"+a] = entry{link: "busybox", mode: 0o777}
	}
	for p, content := range files {
		clean := path.Clean("/" + p)
		if clean != p || p == "/" {
			return nil, fmt.Errorf("file %q is not an absolute clean path", p)
		}
		mode := int64(0o644)
		if strings.HasPrefix(p, "/bin/") || strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		tree[p[1:]] = entry{content: []byte(content), mode: mode} // a file replaces an applet's link
	}

	// Every parent directory as its own entry, so that each is 0755 whatever
	// the engine's default for an implied one.
	dirs := map[string]bool{"rootfs": true}
	names := make([]string, 0, len(tree))
	for p := range tree {
		names = append(names, p)
		for d := path.Dir("rootfs/" + p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		if _, clash := tree[strings.TrimPrefix(d, "rootfs/")]; clash && d != "rootfs" {
			return nil, fmt.Errorf("/%s is both a file and a directory", strings.TrimPrefix(d, "rootfs/"))
		}
	}
	dirNames := make([]string, 0, len(dirs))
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames) // a parent sorts before its children
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	write := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Format = mtime, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := write(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}, []byte(dockerfile)); err != nil {
		return nil, err
	}
	for _, d := range dirNames {
		if err := write(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}, nil); err != nil {
			return nil, err
		}
	}
	for _, p := range names {
		e := tree[p]
		h := &tar.Header{Name: "rootfs/" + p, Mode: e.mode}
		if e.link != "" {
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.content))
		}
		if err := write(h, e.content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadStream reads one of the engine's JSON message streams (a build's or
// an image load's) to its end, and returns the error it reports, if any: the
// engine answers 200 and then reports a failure inside the stream.
func ReadStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	var last string
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading the engine's stream (after %q): %w", last, err)
		}
		switch {
		case m.ErrorDetail != nil && m.ErrorDetail.Message != "":
			return errors.New(m.ErrorDetail.Message)
		case m.Error != "":
			return errors.New(m.Error)
		}
		if s := strings.TrimSpace(m.Stream); s != "" {
			last = s
		}
	}
}

// Save writes the image tagged tag to file as an image archive (docker
// save), which ImageLoad accepts.
func Save(t testing.TB, cli *client.Client, tag, file string) {
	t.Helper()
	if err := SaveImage(cli, tag, file); err != nil {
		t.Fatal(err)
	}
}

// SaveImage is Save for a caller with no test.
func SaveImage(cli *client.Client, tag, file string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rc, err := cli.ImageSave(ctx, []string{tag})
	if err != nil {
		return fmt.Errorf("save %s: %w", tag, err)
	}
	defer func() { _ = rc.Close() }()
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("save %s: %w", tag, err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		_ = f.Close()
		return fmt.Errorf("save %s to %s: %w", tag, file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save %s to %s: %w", tag, file, err)
	}
	return nil
}

// Remove removes the image tagged tag (forced, with its untagged parents);
// one already gone is not an error.
func Remove(t testing.TB, cli *client.Client, tag string) {
	t.Helper()
	if err := RemoveImage(cli, tag); err != nil {
		t.Fatalf("remove image %s: %v", tag, err)
	}
}

// remove is Remove in a cleanup, where a failure is reported, not fatal.
func remove(t testing.TB, cli *client.Client, tag string) {
	t.Helper()
	if err := RemoveImage(cli, tag); err != nil {
		t.Errorf("remove image %s: %v", tag, err)
	}
}

// RemoveImage is Remove for a caller with no test.
func RemoveImage(cli *client.Client, tag string) error {
	// Not the test's context: cleanups run after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// RemoveNode removes what a test node left in the engine: every container
// labelled with it (mesh.node=NODE) and its network, mesh-NODE.
func RemoveNode(cli *client.Client, node string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", "mesh.node="+node)})
	if err == nil {
		for _, c := range list.Items {
			_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
		}
	}
	_, _ = cli.NetworkRemove(ctx, "mesh-"+node, client.NetworkRemoveOptions{})
}

// DeadEngine is the endpoint of an engine that does not answer: a socket
// whose listener is gone, which is what a stopped dockerd leaves behind.
// It needs no engine, and is not gated.
func DeadEngine(t testing.TB) string {
	t.Helper()
	sock := path.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	return "unix://" + sock
}
