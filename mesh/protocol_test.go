package mesh

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestHostOfAnotherProtocolRefused: a host whose heartbeat says another
// protocol than the controller's, older or newer, is refused: status and
// node list show it so, naming both protocols and `mesh release roll`, its
// roster requests are answered with that refusal, and its heartbeat is
// recorded all the same (its version is what an upgrade reads), even one
// that does not decode as this protocol's. Its heartbeat of this protocol
// lifts the refusal.
func TestHostOfAnotherProtocolRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		protocol int
		extra    string // a field this protocol's heartbeat does not have
	}{
		{"older", spec.Protocol - 1, ""},
		{"newer", spec.Protocol + 1, ""},
		{"newer with a field unknown here", spec.Protocol + 1, `,"something_new":1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _ := newController(t, &clock{now: time.Now()})
			key := joinWithKey(t, c, "beta")
			nc, err := busConn(t, c, key, spec.NodeInbox("beta"), nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
				t.Fatal(err)
			}
			beat := func(protocol int, extra string) {
				t.Helper()
				hb := fmt.Sprintf(`{"node":"beta","time":%q,"applied_seq":0,"host_version":"v%d","protocol":%d%s}`,
					time.Now().UTC().Format(time.RFC3339Nano), protocol, protocol, extra)
				if err := nc.Publish(spec.NodeSubject("beta", spec.KindHeartbeat), []byte(hb)); err != nil {
					t.Fatal(err)
				}
			}
			says := []string{fmt.Sprintf("protocol %d refused", tc.protocol), fmt.Sprintf("speaks protocol %d", spec.Protocol), "mesh release roll"}
			beat(tc.protocol, tc.extra)
			poll.Until(t, 20*time.Second, "status shows beta refused", func() (bool, string) {
				st, err := c.status(ctx, spec.StatusRequest{})
				if err != nil {
					return false, err.Error()
				}
				i := slices.IndexFunc(st.Problems, func(p string) bool { return strings.HasPrefix(p, "beta: ") })
				if i < 0 {
					return false, strings.Join(st.Problems, "; ")
				}
				for _, want := range says {
					if !strings.Contains(st.Problems[i], want) {
						return false, st.Problems[i]
					}
				}
				return true, ""
			})
			n, err := c.deps.DB.Node(ctx, "beta")
			if err != nil || n.Protocol != tc.protocol || n.HostVersion != fmt.Sprintf("v%d", tc.protocol) {
				t.Fatalf("beta as recorded: protocol %d version %q (%v), want its heartbeat's", n.Protocol, n.HostVersion, err)
			}
			_, err = askRoster(t, nc, spec.RosterRequest{})
			if spec.KindOf(err) != spec.ReplyRefused {
				t.Fatalf("a roster request of a refused host: %v, want refused", err)
			}
			for _, want := range says {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("a roster request of a refused host: %v, want it to name %q", err, want)
				}
			}

			beat(spec.Protocol, "")
			poll.Until(t, 20*time.Second, "beta's roster request answered", func() (bool, string) {
				_, err := askRoster(t, nc, spec.RosterRequest{})
				return err == nil, fmt.Sprint(err)
			})
		})
	}
}
