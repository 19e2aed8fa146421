package dockertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// unique is a name no other test run (nor another package's tests, run at
// the same time against the same engine) uses.
func unique(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// run runs a container of image (with cmd, or the image's CMD) to its end,
// removes it, and returns its output and exit code.
func run(t *testing.T, cli *client.Client, image, name string, cmd ...string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:   name,
		Config: &container.Config{Image: image, Cmd: cmd},
	})
	if err != nil {
		t.Fatalf("create a container of %s: %v", image, err)
	}
	rm := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := cli.ContainerRemove(ctx, created.ID, client.ContainerRemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
		return nil
	}
	t.Cleanup(func() {
		if err := rm(); err != nil {
			t.Errorf("remove container %s: %v", name, err)
		}
	})
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	wait := cli.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	var code int64
	select {
	case res := <-wait.Result:
		if res.Error != nil {
			t.Fatalf("wait for %s: %s", name, res.Error.Message)
		}
		code = res.StatusCode
	case err := <-wait.Error:
		t.Fatalf("wait for %s: %v", name, err)
	}
	logs, err := cli.ContainerLogs(ctx, created.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	defer func() { _ = logs.Close() }()
	var out bytes.Buffer
	// Without a TTY the engine multiplexes stdout and stderr.
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	// Removed now, not at cleanup: an image a container still uses is only
	// untagged by a forced remove, not removed.
	if err := rm(); err != nil {
		t.Fatalf("remove container %s: %v", name, err)
	}
	return out.String(), code
}

func TestBuildRunSaveLoad(t *testing.T) {
	t.Parallel()
	cli := Client(t)
	id := unique(t)
	tag := "mesh-dockertest/echo:" + id
	Build(t, cli, tag, map[string]string{
		"/etc/greeting":    "ok from a file\n",
		"/bin/hello.sh":    "#!/bin/sh\necho hello\n",
		"/srv/app/run.sh":  "#!/bin/sh\necho run\n",
		"/srv/app/data.md": "# data\n",
	}, "/bin/sh", "-c", "echo ok")

	// The image's CMD.
	if out, code := run(t, cli, tag, "mesh-dockertest-cmd-"+id); out != "ok\n" || code != 0 {
		t.Fatalf("the image's CMD: exit %d, output %q; want exit 0, %q", code, out, "ok\n")
	}
	// Its layout: each applet a link to busybox, each file with its mode.
	check := `set -e
for a in sh httpd nslookup wget sleep cat echo; do [ -L /bin/$a ] && [ -x /bin/$a ] || echo "no link /bin/$a"; done
cat /etc/greeting
/bin/hello.sh
stat -c '%n %a' /bin/busybox /etc/greeting /bin/hello.sh /srv/app/run.sh /srv/app/data.md /srv/app /srv`
	want := `ok from a file
hello
/bin/busybox 755
/etc/greeting 644
/bin/hello.sh 755
/srv/app/run.sh 755
/srv/app/data.md 644
/srv/app 755
/srv 755
`
	if out, code := run(t, cli, tag, "mesh-dockertest-layout-"+id, "/bin/sh", "-c", check); out != want || code != 0 {
		t.Fatalf("the image's layout: exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}

	archive := filepath.Join(t.TempDir(), "image.tar")
	Save(t, cli, tag, archive)
	if fi, err := os.Stat(archive); err != nil || fi.Size() == 0 {
		t.Fatalf("the saved archive: %v, %v", fi, err)
	}
	Remove(t, cli, tag)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, tag); !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect %s after Remove: %v, want not found", tag, err)
	}
	Remove(t, cli, tag) // gone already: not an error

	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	loaded, err := cli.ImageLoad(ctx, f)
	if err != nil {
		t.Fatalf("load %s: %v", archive, err)
	}
	err = ReadStream(loaded)
	_ = loaded.Close()
	if err != nil {
		t.Fatalf("load %s: %v", archive, err)
	}
	img, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatalf("inspect %s after loading its archive: %v", tag, err)
	}
	if !slices.Contains(img.RepoTags, tag) {
		t.Fatalf("the loaded image's tags are %v, want %s among them", img.RepoTags, tag)
	}
	if out, code := run(t, cli, tag, "mesh-dockertest-loaded-"+id); out != "ok\n" || code != 0 {
		t.Fatalf("the loaded image's CMD: exit %d, output %q", code, out)
	}
}

// The engine answers a failed build with 200 and reports the failure in the
// stream; ReadStream returns it. (No engine needed.)
func TestReadStream(t *testing.T) {
	t.Parallel()
	ok := `{"stream":"Step 1/2 : FROM scratch\n"}
{"stream":" ---\u003e \n"}
{"aux":{"ID":"sha256:0123"}}
{"stream":"Successfully built 0123\n"}
`
	if err := ReadStream(strings.NewReader(ok)); err != nil {
		t.Errorf("a successful build's stream: %v", err)
	}
	failed := `{"stream":"Step 1/2 : FROM scratch\n"}
{"errorDetail":{"message":"COPY failed: no source files were specified"},"error":"COPY failed: no source files were specified"}
`
	if err := ReadStream(strings.NewReader(failed)); err == nil || err.Error() != "COPY failed: no source files were specified" {
		t.Errorf("a failed build's stream: %v", err)
	}
	if err := ReadStream(strings.NewReader(`{"stream":"Step 1/2"}{"str`)); err == nil || !strings.Contains(err.Error(), "Step 1/2") {
		t.Errorf("a cut stream: %v", err)
	}
}

// A layout that cannot be built is refused before the engine sees it. (No
// engine needed.)
func TestBuildContextRefusesClashes(t *testing.T) {
	t.Parallel()
	for _, files := range []map[string]string{
		{"/bin": "a file where /bin/busybox's directory must be"},
		{"/srv/a": "x", "/srv/a/b": "y"},
		{"relative": "x"},
		{"/srv/../etc/x": "x"},
	} {
		if _, err := buildContext(files, nil); err == nil {
			t.Errorf("buildContext(%v) succeeded", files)
		}
	}
	if _, err := buildContext(map[string]string{"/bin/sh": "#!/bin/busybox sh\n", "/rootfs": "x"}, []string{"/bin/sh"}); err != nil {
		t.Errorf("a file replacing an applet's link, and one called /rootfs: %v", err)
	}
}
