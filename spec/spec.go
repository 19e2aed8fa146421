// Package spec holds the messages the controller, the hosts and the CLI
// exchange: each message is one type, defined once, imported by every side.
// It depends on the standard library only.
package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Protocol is the version of the messages in this package. A host sends it in
// every heartbeat; a controller shows a host whose protocol it does not speak
// as such rather than as broken, and sends it only what it reads.
//
//	1  the first
//	2  a declaration carries ca_chain (a host of protocol 1 would refuse
//	   every declaration for that unknown field: it is sent none)
//	3  the roster is its own signed, sequenced message (RosterDoc) on
//	   RosterSubject; a declaration names it (roster_ref) instead of
//	   carrying it (a host of protocol 2 is sent it inline, as before)
//	4  a roster change travels as a RosterDelta (the changes and the
//	   signature of the roster they make); a host without its base asks
//	   for the roster within the window it gives (a host of protocol 3 is
//	   published the RosterDoc as well, and refuses the delta)
//	5  the roster messages reach a host through the stream's republish on
//	   RosterDelivery, not through its consumer, which filters only its
//	   own declarations; a host asks for the roster in force (naming the
//	   one it holds) each time it connects (a host of protocol 4 keeps a
//	   consumer that filters the roster messages too)
//	6  no consumer: the stream republishes a node's declarations on
//	   DeclarationDelivery(node); a host asks for its last declaration
//	   (naming the one it holds) each time it connects, and retries by its
//	   own timer what a consumer delivered again (a host of protocol 5 or
//	   older is made a consumer when its heartbeat says so)
//	7  the controller answers each report once it holds it (ReportAck,
//	   under the host's own inbox); a host whose declaration is of this
//	   protocol sends its last report again until it is answered: after
//	   reportRetry, and at once when it connects again (a report published
//	   as its connection dropped is lost)
const Protocol = 7

// ProtocolCAChain is the first protocol whose declarations carry ca_chain.
const ProtocolCAChain = 2

// ProtocolRosterRef is the first protocol whose hosts take the roster as
// its own message and whose declarations name it (roster_ref).
const ProtocolRosterRef = 3

// ProtocolRosterDelta is the first protocol whose hosts take a roster
// change as a RosterDelta.
const ProtocolRosterDelta = 4

// ProtocolRosterPublished is the first protocol whose hosts take the
// roster messages the stream republishes on RosterDelivery (a plain
// subscription) and ask for the roster in force when they connect: their
// consumers filter their own declarations alone. An older host's consumer
// filters the roster messages too.
const ProtocolRosterPublished = 5

// ProtocolNoConsumer is the first protocol whose hosts take their
// declarations from the stream's republish, with no consumer.
const ProtocolNoConsumer = 6

// ProtocolReportAck is the first protocol whose controller answers each
// report, and whose hosts send their last report again until answered.
const ProtocolReportAck = 7

// Decode reads exactly one JSON value into v and refuses unknown fields and
// trailing data: a field one side sends and the other ignores is how the seeds
// lost one.
func Decode(data []byte, v any) error {
	if d, ok := v.(*Declaration); ok {
		return decodeDeclaration(data, d) // in one pass, as it was before kinds were registered
	}
	return decode(data, v)
}

func decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}
