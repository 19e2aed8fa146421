package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Docker is the container engine, reached through its API (never its
// CLI), so any engine that serves the same API serves mesh.
type Docker struct {
	cli      *client.Client
	endpoint string
	// mutations counts the engine calls that change something (every
	// request but GET and HEAD): what a roster-only apply must make none of.
	mutations atomic.Int64
	// hostStops are the containers the host itself stopped, by ID, and
	// deaths those the engine said died, by name.
	hostStops, deaths recent
}

// NewDocker is a client of the engine at endpoint (unix:///path or
// tcp://host:port); empty means DOCKER_HOST, else the engine's default
// socket. It connects to nothing yet.
func NewDocker(endpoint string) (*Docker, error) {
	d := &Docker{}
	opts := []client.Opt{client.FromEnv, client.WithHTTPRequestHook(func(r *http.Request) error {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			d.mutations.Add(1)
		}
		return nil
	})}
	if endpoint != "" {
		opts = append(opts, client.WithHost(endpoint))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("container engine at %q: %w", endpoint, err)
	}
	d.cli, d.endpoint = cli, cli.DaemonHost()
	return d, nil
}

// Close releases the client's connections.
func (d *Docker) Close() error { return d.cli.Close() }

// Endpoint is where the engine is reached.
func (d *Docker) Endpoint() string { return d.endpoint }

// Mutations is how many changing calls the client has made so far.
func (d *Docker) Mutations() int64 { return d.mutations.Load() }

// Version is the engine's version and API ("20.10.24, API 1.41"), or why it
// does not answer.
func (d *Docker) Version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := d.cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return "", d.unreachable(err)
	}
	return fmt.Sprintf("%s, API %s", v.Version, v.APIVersion), nil
}

// Ping says whether the engine answers, through its health endpoint. A
// probe asks this and not Version: dockerd answers a version query by
// running runc and docker-init to ask theirs, two processes each time,
// which a check at the heartbeat's pace must not cost the machine.
func (d *Docker) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := d.cli.Ping(ctx, client.PingOptions{}); err != nil {
		return d.unreachable(err)
	}
	return nil
}

// unreachable names the engine in an error from it.
func (d *Docker) unreachable(err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("the container engine at %s does not answer (is dockerd running?): %w", d.endpoint, err)
	}
	return fmt.Errorf("container engine at %s: %w", d.endpoint, err)
}

// wrap names what failed in an engine call, and the engine when it does
// not answer.
func (d *Docker) wrap(what string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%s: %w", what, d.unreachable(err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

func notFound(err error) bool { return cerrdefs.IsNotFound(err) }

// Reload sends the container called name signal, or restarts it when
// signal is "" (stopping it within stopTimeout); false when there is no
// such container, which is nothing to do.
func (d *Docker) Reload(ctx context.Context, name, signal string) (bool, error) {
	if signal != "" {
		_, err := d.cli.ContainerKill(ctx, name, client.ContainerKillOptions{Signal: signal})
		switch {
		case notFound(err):
			return false, nil
		case err != nil:
			return false, d.wrap("send "+signal+" to container "+name, err)
		}
		return true, nil
	}
	ct, err := d.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	switch {
	case notFound(err):
		return false, nil
	case err != nil:
		return false, d.wrap("inspect container "+name, err)
	}
	d.stopping(ct.Container.ID) // its death is the host's, not a crash
	timeout := stopTimeout
	_, err = d.cli.ContainerRestart(ctx, ct.Container.ID, client.ContainerRestartOptions{Timeout: &timeout})
	switch {
	case notFound(err):
		return false, nil
	case err != nil:
		return false, d.wrap("restart container "+name, err)
	}
	return true, nil
}

// drainMessages reads an engine's JSON message stream (a pull or a load) to
// its end and returns the first error it carries.
func drainMessages(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the engine's answer: %w", err)
		}
		if m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}
