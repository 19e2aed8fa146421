package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
)

// ControllerJoin is a machine joining a mesh as one of its controllers,
// with its node: where its parts listen and its cluster's routes, and the
// token from mesh token create --controller.
type ControllerJoin struct {
	Dir   string // the state directory, absent or empty
	Token spec.Token
	// Address is where other nodes reach this machine's node.
	Address string
	// Addrs are where its bus, HTTP listener and resolver bind, kept in
	// D/addrs.json; BusURL is the bus's URL the other machines dial.
	Addrs  spec.Addrs
	BusURL string
	// Cluster is where its bus's routes listen (host and fixed port).
	Cluster string
	Now     time.Time
	// Waiting, when given, is told why the enrolment is sent again.
	Waiting func(why error)
}

// JoinController enrols the machine of j as a controller of the mesh its
// token names: it makes its node's keys (its sealing key, X25519, is the
// key the controllers' shared keys are sealed to), sends their public
// halves with its bus's place in the cluster, and writes what the
// controller answers: the shared keys, the CA, the cluster's state and
// the operator's credential in D/controller, the node's state in D/host,
// and D/addrs.json. mesh controller --dir D then runs it. On a failure it
// leaves nothing behind.
func JoinController(ctx context.Context, j ControllerJoin) (err error) {
	if !j.Token.Controller {
		return fmt.Errorf("token %s enrols a host: run mesh host --join with it, or create a controller's token with mesh token create --controller %s", j.Token.ID, j.Token.Node)
	}
	if _, _, err := net.SplitHostPort(j.Cluster); err != nil {
		return fmt.Errorf("the cluster's address %q: %w", j.Cluster, err)
	}
	if err := RefuseExisting(j.Dir); err != nil {
		return err
	}
	if err := os.MkdirAll(j.Dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", j.Dir, err)
	}
	defer func() {
		if err != nil {
			for _, name := range []string{statedir.ControllerDir, statedir.HostDir, statedir.OperatorCreds, statedir.AddrsFile} {
				os.RemoveAll(filepath.Join(j.Dir, name))
			}
		}
	}()
	name, err := randomText(4)
	if err != nil {
		return err
	}
	server := "c-" + name
	var cluster ClusterState
	err = host.Join(ctx, host.JoinConfig{
		Dir: statedir.Host(j.Dir), Token: j.Token, Address: j.Address, Now: j.Now,
		Controller: &spec.ControllerJoin{Server: server, Route: j.Cluster, Bus: j.BusURL},
		Waiting:    j.Waiting,
		Answered: func(res spec.EnrolResult, key *seal.NodeKey) error {
			if res.Controller == "" {
				return errors.New("its answer holds no keys for a controller")
			}
			keys, err := OpenSharedKeys(key, res.Controller)
			if err != nil {
				return err
			}
			keys.Cluster.Server, keys.Cluster.Listen, keys.Cluster.BusOnly = server, j.Cluster, true
			if err := keys.Write(j.Dir); err != nil {
				return err
			}
			cluster = keys.Cluster
			if keys.Operator == nil {
				return nil
			}
			return statedir.WriteOperator(j.Dir, *keys.Operator)
		},
	})
	if err != nil {
		return err
	}
	// Its own host dials its own bus first, then the others.
	st, _, err := host.ReadState(statedir.Host(j.Dir))
	if err != nil {
		return err
	}
	st.Bus = cluster.BusURLs()
	if err := host.WriteState(statedir.Host(j.Dir), st); err != nil {
		return err
	}
	return statedir.WriteAddrs(j.Dir, j.Addrs)
}

// checkJoin refuses j into the cluster st: a server's name or a route
// address it holds already, or one that is no address.
func checkJoin(st *ClusterState, j spec.ControllerJoin) error {
	if st == nil {
		return errors.New("this controller runs without --cluster: run it with --cluster HOST:PORT first")
	}
	if !strings.HasPrefix(j.Server, "c-") || len(j.Server) > 40 {
		return fmt.Errorf("a controller's server name is c- and a few letters, not %q", j.Server)
	}
	if _, _, err := net.SplitHostPort(j.Route); err != nil {
		return fmt.Errorf("the joining controller's cluster address %q: %v", j.Route, err)
	}
	if j.Bus == "" {
		return errors.New("the joining controller names no bus URL")
	}
	for _, p := range st.Peers {
		switch {
		case p.Server == j.Server:
			return fmt.Errorf("a controller called %s is in the cluster already", j.Server)
		case p.Route == j.Route:
			return fmt.Errorf("the cluster's routes at %s are controller %s's already", j.Route, p.Server)
		}
	}
	return nil
}
