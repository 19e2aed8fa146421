package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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
	ctx  context.Context // ends on SIGINT or SIGTERM
	nc   *nats.Conn
	bus  string
	lost *loss
}

// loss is the end of a connection to the controller, said once: when and
// why, for a command that waits on the bus to say at once rather than when
// its wait ends.
type loss struct {
	once sync.Once
	done chan struct{}
	at   time.Time
	err  error
}

func newLoss() *loss { return &loss{done: make(chan struct{})} }

// options are the connection options that make the connection's end l's.
// The operator's connection does not reconnect: a disconnection is its
// end, and its cause is the first one reported.
func (l *loss) options() []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { l.end(err) }),
		nats.ClosedHandler(func(nc *nats.Conn) { l.end(nc.LastError()) }),
	}
}

func (l *loss) end(err error) {
	l.once.Do(func() {
		if err == nil {
			err = errors.New("the bus closed it")
		}
		l.at, l.err = time.Now(), err
		close(l.done)
	})
}

// Done is closed once the connection ended.
func (l *loss) Done() <-chan struct{} { return l.done }

// String says when and why the connection ended, once it has.
func (l *loss) String() string {
	return fmt.Sprintf("lost the connection to the controller at %s (%v)", l.at.Format(time.TimeOnly), l.err)
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
	var lost *loss
	connect := func() (*nats.Conn, error) {
		lost = newLoss()
		return nats.Connect("nats://"+bus, append(lost.options(),
			nats.Name("operator"),
			nats.Nkey(pub, key.Sign),
			nats.Secure(ca.ClientTLS(root, spec.BusTLSName)),
			nats.TLSHandshakeFirst(),
			nats.CustomInboxPrefix(spec.OperatorInbox),
			nats.Timeout(5*time.Second),
			nats.NoReconnect(),
		)...)
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
	return &Operator{ctx: ctx, nc: nc, bus: bus, lost: lost}, nil
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
	// No controller served it, so none carried it out: while most of a
	// cluster's controllers answer, one is about to lead and it is sent
	// again.
	var roles []spec.ControllerRole
	for end := time.Now().Add(min(wait, electionWait)); errors.Is(err, nats.ErrNoResponders) && ctx.Err() == nil; {
		if roles = o.controllerRoles(); !electing(roles) || time.Now().After(end) {
			break
		}
		msg, err = o.nc.RequestWithContext(ctx, spec.APISubject(verb), body)
	}
	if o.ctx.Err() != nil {
		return fmt.Errorf("%s: interrupted; the controller may still carry it out", verb)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = nats.ErrTimeout
	}
	if err != nil && o.lost != nil && isDone(o.lost.Done()) {
		return fmt.Errorf("%s: %s: whether the controller carried it out is not known (mesh status says, once it answers)", verb, o.lost)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%s: no controller answers on the bus at %s%s", verb, o.bus, reachable(roles))
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

// isDone says whether done is closed.
func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
