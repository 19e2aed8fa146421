package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/safefile"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
)

// ClusterFile is D/controller/cluster.json, 0600: the controllers' cluster
// as this one knows it. Only a mesh run with --cluster has one.
const ClusterFile = "cluster.json"

// ClusterState is what a controller keeps of its cluster: its own
// server's name, the route credentials every server shares, and the
// peers, itself among them. The peer set changes by an explicit join
// or removal only.
type ClusterState struct {
	// Name is the cluster's name: the mesh's.
	Name string `json:"name"`
	// Server is this server's name, stable across its restarts.
	Server string `json:"server"`
	// Listen is where this server's routes listen (--cluster).
	Listen   string `json:"listen"`
	User     string `json:"user"`
	Password string `json:"password"`
	// Peers are every controller of the cluster, this one too.
	Peers []Peer `json:"peers"`
	// BusOnly marks a controller that joined: its journal follows the
	// log and never begins one (the controller it joined began it), and
	// it campaigns for the lease only once its view caught up.
	BusOnly bool `json:"bus_only,omitempty"`
	// Removed are the servers removed from the cluster (mesh cluster
	// remove): never a peer again, whatever an older peer set says.
	Removed []string `json:"removed,omitempty"`
}

// Peer is one controller of the cluster: its server's name, its routes'
// address and its bus's URL (what hosts dial), and its node's name when
// it joined.
type Peer struct {
	Server string `json:"server"`
	Route  string `json:"route"`
	Bus    string `json:"bus"`
	Node   string `json:"node,omitempty"`
}

// NewClusterState is the cluster of one server a mesh named meshName
// starts with, its routes on listen and its bus reached at busURL: a new
// server name and new route credentials.
func NewClusterState(meshName, listen, busURL string) (ClusterState, error) {
	name, err := randomText(4)
	if err != nil {
		return ClusterState{}, err
	}
	password, err := randomText(24)
	if err != nil {
		return ClusterState{}, err
	}
	st := ClusterState{Name: meshName, Server: "c-" + name, Listen: listen, User: "route", Password: password}
	st.Peers = []Peer{{Server: st.Server, Route: listen, Bus: busURL}}
	return st, nil
}

func randomText(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a random name: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ReadClusterState reads D/controller/cluster.json: nil for a mesh run
// without --cluster.
func ReadClusterState(dir string) (*ClusterState, error) {
	path := filepath.Join(statedir.Controller(dir), ClusterFile)
	body, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the cluster's state: %w", err)
	}
	var st ClusterState
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("read the cluster's state %s: %w", path, err)
	}
	return &st, nil
}

// WriteClusterState writes D/controller/cluster.json atomically, 0600: it
// holds the route credentials.
func WriteClusterState(dir string, st ClusterState) error {
	body, _ := json.MarshalIndent(st, "", "  ")
	if err := safefile.WriteFile(filepath.Join(statedir.Controller(dir), ClusterFile), append(body, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the cluster's state: %w", err)
	}
	return nil
}

// KeepClusterListen records listen as where this server's routes listen,
// its own peer's route too, making the cluster's state for a mesh run
// with --cluster for the first time. It returns the state as written.
func KeepClusterListen(dir, meshName, listen, busURL string) (ClusterState, error) {
	st, err := ReadClusterState(dir)
	if err != nil {
		return ClusterState{}, err
	}
	if st == nil {
		fresh, err := NewClusterState(meshName, listen, busURL)
		if err != nil {
			return ClusterState{}, err
		}
		return fresh, WriteClusterState(dir, fresh)
	}
	st.Listen = listen
	for i := range st.Peers {
		if st.Peers[i].Server == st.Server {
			st.Peers[i].Route = listen
		}
	}
	return *st, WriteClusterState(dir, *st)
}

// removedSelf says whether this controller was removed from its cluster.
func (st *ClusterState) removedSelf() bool { return slices.Contains(st.Removed, st.Server) }

// AddPeer records p among the peers, replacing the peer of its name.
func (st *ClusterState) AddPeer(p Peer) {
	st.Peers = slices.DeleteFunc(st.Peers, func(q Peer) bool { return q.Server == p.Server })
	st.Peers = append(st.Peers, p)
}

// BusURLs are the peers' bus URLs, this server's first.
func (st ClusterState) BusURLs() []string {
	var urls []string
	for _, p := range st.Peers {
		if p.Server == st.Server {
			urls = append([]string{p.Bus}, urls...)
		} else if p.Bus != "" {
			urls = append(urls, p.Bus)
		}
	}
	return urls
}

// broker is the bus's cluster: nil while the cluster is one server, whose
// bus runs alone (JetStream runs clustered with two servers or more: its
// meta group needs a peer to elect a leader). Its route certificate is
// issued by auth for the bus's name, which every peer verifies.
func (st ClusterState) broker(auth *ca.Authority) (*broker.Cluster, error) {
	if len(st.Peers) < 2 {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(st.Listen)
	if err != nil {
		return nil, fmt.Errorf("cluster address %q: %w", st.Listen, err)
	}
	cert, err := auth.IssueServer(busNames(), busIPs(host), 365*24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("issue the route certificate: %w", err)
	}
	var routes []string
	for _, p := range st.Peers {
		routes = append(routes, p.Route)
	}
	return &broker.Cluster{
		Name: st.Name, ServerName: st.Server, Listen: st.Listen, Peers: routes,
		Cert: cert, Root: auth.Root(), TLSName: spec.BusTLSName, User: st.User, Password: st.Password,
	}, nil
}

// busCluster is the cluster the bus of the mesh in dir runs in: nil for a
// mesh run without --cluster, or while its cluster is one server.
func busCluster(dir string, auth *ca.Authority) (*broker.Cluster, error) {
	st, err := ReadClusterState(dir)
	if err != nil || st == nil {
		return nil, err
	}
	return st.broker(auth)
}

// dropStandalone removes what the bus kept while it ran alone, in its
// JetStream directory jsDir, before its first run in a cluster: the
// cluster's meta layer knows none of those streams, deletes them as
// orphans only some 30 s after the server starts, and until then a
// stream of the same name cannot be made, so the controller that leads
// waits that long to serve. It drops them only when the put-back mark
// is there (the journal then begins a new log from the store's view,
// which holds every acknowledged write; the leader sends the hosts what
// they have not applied) and the directory holds no meta group (it never
// ran clustered). The edges' shared bucket goes with them, as the orphans'
// cleanup took it.
func dropStandalone(st *ClusterState, jsDir, putBack string) (bool, error) {
	if !st.clustered() {
		return false, nil
	}
	if _, err := os.Stat(putBack); err != nil {
		return false, nil
	}
	js := filepath.Join(jsDir, "jetstream")
	if _, err := os.Stat(js); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	metas, err := filepath.Glob(filepath.Join(js, "*", "_js_", "_meta_"))
	if err != nil || len(metas) > 0 {
		return false, err
	}
	if err := os.RemoveAll(js); err != nil {
		return false, fmt.Errorf("drop the streams the bus kept alone: %w", err)
	}
	return true, nil
}
