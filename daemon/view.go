package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// inProcessTimeout bounds the in-process connection's requests.
const inProcessTimeout = time.Minute

// busConnect is how the journal reaches bus in process, as key's user.
func busConnect(bus *broker.Server, key nkeys.KeyPair) func(context.Context) (jetstream.JetStream, error) {
	return func(context.Context) (jetstream.JetStream, error) {
		pub, err := key.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("journal bus key: %w", err)
		}
		nc, err := nats.Connect("", nats.InProcessServer(bus.NATS()), nats.Nkey(pub, key.Sign),
			nats.Name("controller journal"), nats.Timeout(inProcessTimeout))
		if err != nil {
			return nil, fmt.Errorf("connect the journal to the bus: %w", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("journal JetStream: %w", err)
		}
		return js, nil
	}
}

// rebuildStore makes the store at path again, when it is missing, from
// the log on the bus: the snapshot the log began with, then every entry
// after, applied before anything is served. The bus runs for it on
// loopback, with the controller's user only: alone, or as its server of
// the controllers' cluster, where the log is. A controller that joined
// waits for the log when the bus holds none yet: the controller it joined
// begins it.
func (m *Mesh) rebuildStore(ctx context.Context, path string, auth *ca.Authority, ctlKeys mesh.Keys, cluster *ClusterState) error {
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	log := m.log.With("component", "rebuild")
	cert, err := auth.IssueServer(busNames(), []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		return err
	}
	pub, err := ctlKeys.Full.PublicKey()
	if err != nil {
		return err
	}
	var routes *broker.Cluster
	if cluster != nil {
		if routes, err = cluster.broker(auth); err != nil {
			return err
		}
	}
	bus, err := broker.New(broker.Config{
		Listen:   "127.0.0.1:0",
		StoreDir: filepath.Join(statedir.Controller(m.cfg.Dir), mesh.JSDir),
		TLS:      &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Users:    []broker.User{{NKey: pub, Full: true}},
		Cluster:  routes,
	}, log.With("component", "bus"))
	if err != nil {
		return err
	}
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- bus.Run(bctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-bus.Ready():
	case err := <-done:
		return fmt.Errorf("rebuild the store: the bus stopped: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
	connect := busConnect(bus, ctlKeys.Full)
	js, err := connect(ctx)
	if err != nil {
		return err
	}
	defer js.Conn().Close()
	if err := rebuildFrom(ctx, log, js, path, routes != nil); err != nil {
		return err
	}
	db, err := store.Open(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	return catchUp(ctx, log, db, connect)
}

// rebuildFrom writes the store at path from the log's newest snapshot.
// In a cluster the log may not be there yet (the controller joined
// begins it) nor the cluster's JetStream ready: it tries again until ctx
// ends.
func rebuildFrom(ctx context.Context, log *slog.Logger, js jetstream.JetStream, path string, clustered bool) error {
	said := false
	for {
		err := journal.Rebuild(ctx, js, journal.Config{}, path)
		switch {
		case err == nil:
			return nil
		case !clustered && errors.Is(err, journal.ErrNoLog):
			return fmt.Errorf("%s is missing, and the bus holds no log of the store to rebuild it from", path)
		case !clustered:
			return err
		}
		if !said {
			log.Info("waiting for the store's log in the controllers' cluster", "why", err)
			said = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rebuild the store: %w (last: %v)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

// catchUp applies every entry of the log to db, then stops.
func catchUp(ctx context.Context, log *slog.Logger, db *store.DB, connect func(context.Context) (jetstream.JetStream, error)) error {
	j := journal.New(journal.Config{}, log, db, connect)
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- j.Run(jctx) }()
	select {
	case <-j.Ready():
		stop()
		<-done
		rev, err := db.Applied(ctx)
		log.Info("store rebuilt from its log", "revision", rev)
		return err
	case err := <-done:
		stop()
		if err == nil {
			err = ctx.Err()
		}
		return fmt.Errorf("rebuild the store: %w", err)
	}
}
