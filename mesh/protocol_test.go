package mesh

import (
	"context"
	"errors"
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
			poll.Until(t, 20*time.Second, "status shows beta refused", func() error {
				st, err := c.status(ctx, spec.StatusRequest{})
				if err != nil {
					return err
				}
				i := slices.IndexFunc(st.Problems, func(p string) bool { return strings.HasPrefix(p, "beta: ") })
				if i < 0 {
					return errors.New(strings.Join(st.Problems, "; "))
				}
				for _, want := range says {
					if !strings.Contains(st.Problems[i], want) {
						return errors.New(st.Problems[i])
					}
				}
				return nil
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
			poll.Until(t, 20*time.Second, "beta's roster request answered", func() error {
				_, err := askRoster(t, nc, spec.RosterRequest{})
				return err
			})
		})
	}
}

// TestJoinOfAnotherProtocolRefused: an enrolment of another protocol,
// older, newer, newer with a field unknown here, or saying none, is
// refused naming both protocols and what to do, and joins nothing: the
// token stays unused, and the same token then joins a host of this
// protocol.
func TestJoinOfAnotherProtocolRefused(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "beta", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := spec.ParseToken(res.Token)
	if err != nil {
		t.Fatal(err)
	}
	ours := enrolRequest(t, tok, "beta")
	for _, tc := range []struct {
		name     string
		protocol string
		extra    string
	}{
		{"older", fmt.Sprint(spec.Protocol - 1), ""},
		{"newer", fmt.Sprint(spec.Protocol + 1), ""},
		{"newer with a field unknown here", fmt.Sprint(spec.Protocol + 1), `,"something_new":1`},
		{"none said", "0", ""},
	} {
		req := strings.Replace(string(ours), fmt.Sprintf(`"protocol":%d`, spec.Protocol), `"protocol":`+tc.protocol, 1)
		req = strings.TrimSuffix(req, "}") + tc.extra + "}"
		_, err := c.enrolment.enrol(ctx, []byte(req))
		if spec.KindOf(err) != spec.ReplyRefused {
			t.Fatalf("%s: %v, want refused", tc.name, err)
		}
		for _, want := range []string{"protocol " + tc.protocol + " refused", fmt.Sprintf("speaks protocol %d", spec.Protocol), "join with the controller's release"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want it to name %q", tc.name, err, want)
			}
		}
		if _, err := db.Node(ctx, "beta"); err == nil {
			t.Fatalf("%s: beta joined", tc.name)
		}
	}
	if _, err := c.enrolment.enrol(ctx, ours); err != nil {
		t.Fatalf("the token after the refusals, this protocol: %v", err)
	}
}
