package e2e

// This file's name sorts first on purpose: go test releases the first
// parallel test of a package first, sixteen at a time (the rest as they
// are released, not in source order), and the one here waits out three
// minutes of a lost path. Started first, it runs beside the others
// instead of after most of them.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestOverlayRelayLossShowsInStatus: with the relay killed, mesh status
// names the peers that lost their path within OverlayStale (3 minutes),
// and traffic returns when the relay is back, started again with no
// flags.
func TestOverlayRelayLossShowsInStatus(t *testing.T) {
	optin.NeedSlow(t, "waits out the 3 minutes after which a path without a handshake is a failure")
	t.Parallel()
	s := newSites(t, 1)
	relayIP := "198.18.0.3"
	relayNS := s.publicMachine("relay", relayIP)
	m := s.genesis("--overlay", overlayCIDR, "--endpoint", controllerIP+":51820")
	relayDir, rd := m.join(relayNS, "relay", relayIP, "--relay", "--endpoint", relayIP+":51820")
	a, b := s.a.hosts[0], s.b.hosts[0]
	m.join(a, "site-a", s.a.hostIPs[0])
	m.join(b, "site-b", s.b.hostIPs[0])
	by := m.waitMembers("ctl", "relay", "site-a", "site-b")
	waitOverlayAddr(t, b, by["site-b"].IP)
	svc := serveOnOverlay(t, b, by["site-b"].IP)
	reaches(t, a, svc, by["site-a"].IP, 60*time.Second)

	rd.kill9(t)
	killed := time.Now()
	poll.Until(t, spec.OverlayStale+time.Minute, "status naming the lost paths", func() error {
		out, _, code := cliIn(t, s.ctl, "status", "--dir", m.dir, "--json")
		var st spec.StatusResult
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		failures := map[string]string{}
		for _, n := range st.Nodes {
			failures[n.Node] = strings.Join(n.Failures, "; ")
		}
		ok := code != 0 && !st.AllClear &&
			strings.Contains(failures["site-a"], "site-b") && strings.Contains(failures["site-b"], "site-a")
		if ok {
			return nil
		}
		return fmt.Errorf("exit %d, failures %q", code, failures)
	})
	if took := time.Since(killed); took > spec.OverlayStale+30*time.Second {
		t.Errorf("status named the lost paths %s after the relay was killed, more than %s", took, spec.OverlayStale)
	}
	if _, err := dialEcho(a, svc); err == nil {
		t.Error("site A still reaches site B with the relay killed")
	}

	meshIn(t, relayNS, "host", "--dir", relayDir)
	reaches(t, a, svc, by["site-a"].IP, 90*time.Second)
	poll.Until(t, 60*time.Second, "status all clear again", func() error {
		out, _, code := cliIn(t, s.ctl, "status", "--dir", m.dir)
		if code == 0 {
			return nil
		}
		return errors.New(out)
	})
}
