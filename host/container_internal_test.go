package host

import (
	"testing"

	"github.com/moby/moby/api/types/container"
)

func TestStoppedNote(t *testing.T) {
	cases := []struct {
		state *container.State
		want  string
	}{
		{nil, "started again"},
		{&container.State{Status: container.StateExited, ExitCode: 137, FinishedAt: "2026-11-30T05:00:00Z"},
			"started again: it had exited with code 137 at 2026-11-30T05:00:00Z"},
		{&container.State{Status: container.StateExited, ExitCode: 137, OOMKilled: true, FinishedAt: "2026-11-30T05:00:00Z"},
			"started again: it had exited with code 137, out of memory at 2026-11-30T05:00:00Z"},
		{&container.State{Status: container.StateCreated, FinishedAt: "0001-01-01T00:00:00Z"}, "started again: it had never started"},
		{&container.State{Status: container.StateDead, ExitCode: 1, Error: "no space left on device", FinishedAt: "0001-01-01T00:00:00Z"},
			"started again: it was dead (exit code 1): no space left on device"},
	}
	for _, c := range cases {
		if got := stoppedNote(c.state); got != c.want {
			t.Errorf("stoppedNote(%+v) = %q, want %q", c.state, got, c.want)
		}
	}
}
