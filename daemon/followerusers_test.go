package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"slices"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nkeys"
)

// TestFollowerKeepsAUsedTokensUserAWhile: a token's enrolment user the
// view no longer holds (its token used through the leader) stays on a
// follower's server for enrolGrace, so the joining host connected there
// hears the leader's answer; a node's user left out goes at once.
func TestFollowerKeepsAUsedTokensUserAWhile(t *testing.T) {
	t.Parallel()
	p := spec.EnrolPermissions("t1")
	token := broker.User{NKey: "UTOKEN", Publish: p.Publish, Subscribe: p.Subscribe}
	n := spec.NodePermissions("beta")
	node := broker.User{NKey: "UNODE", Publish: n.Publish, Subscribe: n.Subscribe}
	ctl := broker.User{NKey: "UCTL", Full: true}
	last := []broker.User{ctl, token, node}
	gone := map[string]time.Time{}
	t0 := time.Now()
	keys := func(us []broker.User) []string {
		var ks []string
		for _, u := range us {
			ks = append(ks, u.NKey)
		}
		slices.Sort(ks)
		return ks
	}
	for _, tc := range []struct {
		at   time.Duration
		want []string
	}{
		{0, []string{"UCTL", "UTOKEN"}},
		{enrolGrace - time.Second, []string{"UCTL", "UTOKEN"}},
		{enrolGrace, []string{"UCTL"}},
	} {
		got := keys(keepEnrolments(last, []broker.User{ctl}, gone, t0.Add(tc.at)))
		if !slices.Equal(got, tc.want) {
			t.Errorf("at %s: users %q, want %q", tc.at, got, tc.want)
		}
	}
	if len(gone) != 0 {
		t.Errorf("a user past its grace is still remembered: %v", gone)
	}
}

// TestRestartedFollowerKeepsAJoiningHostsUser: a follower started again
// admits a joining host under its token's enrolment user from the view
// it starts with; its first sync, the token used meanwhile through the
// leader, keeps that user enrolGrace rather than cutting the host off
// before the leader's answer reaches it.
func TestRestartedFollowerKeepsAJoiningHostsUser(t *testing.T) {
	t.Parallel()
	nkey := func() string {
		k, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := k.PublicKey()
		return pub
	}
	p := spec.EnrolPermissions("t1")
	token := broker.User{NKey: nkey(), Publish: p.Publish, Subscribe: p.Subscribe}
	ctl := broker.User{NKey: nkey(), Full: true}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Never started: a certificate only to be configured.
	bus, err := broker.New(broker.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), Users: []broker.User{ctl, token},
		TLS: &tls.Config{Certificates: []tls.Certificate{{PrivateKey: key}}}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	sync := syncUsers(bus, func(context.Context) ([]broker.User, error) { return []broker.User{ctl}, nil })
	if err := sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range bus.Users() {
		got = append(got, u.NKey)
	}
	slices.Sort(got)
	want := []string{ctl.NKey, token.NKey}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("users in force after a restarted follower's first sync: %q, want %q", got, want)
	}
}
