package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/internal/retry"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/urfave/cli/v2"
)

// Operator is the CLI's connection to a mesh's controller. The CLI never
// opens the store: it calls the controller over the bus.
type Operator struct {
	ctx context.Context // ends on SIGINT or SIGTERM
	nc  *nats.Conn
	bus string
}

func dialOperator(c *cli.Context) (*Operator, error) {
	return DialOperator(c.Context, c.String("dir"))
}

// DialOperator connects to the controller of the mesh kept in dir.
func DialOperator(ctx context.Context, dir string) (*Operator, error) {
	addrs, err := statedir.ReadAddrs(dir)
	if err != nil {
		return nil, err
	}
	creds, err := statedir.ReadOperator(dir)
	if err != nil {
		return nil, err
	}
	key, err := nkeys.FromSeed([]byte(creds.Seed))
	if err != nil {
		return nil, fmt.Errorf("the operator credential in %s: %w", dir, err)
	}
	root, err := ca.ParseCert([]byte(creds.CARoot))
	if err != nil {
		return nil, fmt.Errorf("the mesh root in the operator credential: %w", err)
	}
	pub, _ := key.PublicKey()
	bus := daemon.Dialable(addrs.Bus)
	connect := func() (*nats.Conn, error) {
		return nats.Connect("nats://"+bus,
			nats.Name("operator"),
			nats.Nkey(pub, key.Sign),
			nats.Secure(ca.ClientTLS(root, spec.BusTLSName)),
			nats.TLSHandshakeFirst(),
			nats.CustomInboxPrefix(spec.OperatorInbox),
			nats.Timeout(5*time.Second),
			nats.NoReconnect(),
		)
	}
	// A connection that fails on the way (closed by the bus, a handshake
	// late on a loaded machine) is not an answer, so try again, briefly. A
	// refused credential is an answer.
	var nc *nats.Conn
	err = retry.Do(ctx, 4, retry.Linear(100*time.Millisecond), func() error {
		var err error
		nc, err = connect()
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrNoServers) {
			return retry.Final(err)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reach the mesh's bus at %s: %w (is the controller running? mesh controller --dir %s)", bus, err, dir)
	}
	return &Operator{ctx: ctx, nc: nc, bus: bus}, nil
}

func (o *Operator) Close() { o.nc.Close() }

// call asks the controller to do v with req and returns its result,
// waiting as long as v's Timeout. An error the controller answers is a
// *spec.ReplyError, with its kind.
func call[Req, Res any](o *Operator, v spec.Verb[Req, Res], req Req) (Res, error) {
	return CallWithin(o, v, req, v.Timeout)
}

// Call is call for programs outside the package (the fleet benchmark, the
// end-to-end tests).
func Call[Req, Res any](o *Operator, v spec.Verb[Req, Res], req Req) (Res, error) {
	return call(o, v, req)
}

// CallWithin is Call, waiting for the answer as long as wait rather than
// the verb's own timeout: a push to a fleet of thousands answers once
// every node was sent its declaration.
func CallWithin[Req, Res any](o *Operator, v spec.Verb[Req, Res], req Req, wait time.Duration) (Res, error) {
	var res Res
	err := o.request(v.Name, req, &res, wait)
	return res, err
}

// request sends req to verb's subject and decodes the answer into res.
func (o *Operator) request(verb string, req, res any, wait time.Duration) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", verb, err)
	}
	ctx, cancel := context.WithTimeout(o.ctx, wait)
	defer cancel()
	msg, err := o.nc.RequestWithContext(ctx, spec.APISubject(verb), body)
	if o.ctx.Err() != nil {
		return fmt.Errorf("%s: interrupted; the controller may still carry it out", verb)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = nats.ErrTimeout
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%s: no controller answers on the bus at %s", verb, o.bus)
	}
	if errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("%s: the controller did not answer within %s (mesh status, and its log, say what it is doing)", verb, wait)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	err = spec.DecodeReply(msg.Data, res)
	var re *spec.ReplyError
	if err != nil && !errors.As(err, &re) {
		return fmt.Errorf("%s: %w", verb, err)
	}
	return err
}

// Conn is the operator's bus connection, for listening to a push's
// progress outside the package (the fleet benchmark).
func (o *Operator) Conn() *nats.Conn { return o.nc }

// callCmd dials the operator API, makes one call and closes.
func callCmd[Req, Res any](c *cli.Context, v spec.Verb[Req, Res], req Req) (Res, error) {
	op, err := dialOperator(c)
	if err != nil {
		var zero Res
		return zero, err
	}
	defer op.Close()
	return call(op, v, req)
}
