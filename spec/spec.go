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

// Protocol is the version of the messages in this package. A host sends it
// in every heartbeat, and the controller and the hosts stamp it on every
// declaration and roster message. A peer of another protocol is refused at
// the handshake (ProtocolRefusal): the controller marks a host whose
// heartbeat says another one as refused and serves it nothing but what an
// upgrade needs; a host refuses a declaration or roster message of another
// one, applying nothing of it but its binary resource.
//
// It is bumped only across a released version, never between two builds of
// one: a change to these messages that an existing release cannot read
// waits for the next release and bumps Protocol once for all of them. The
// one thing that stays readable across every version, whatever the
// protocol, is what an upgrade needs: the binary kind (BinarySpec), the
// host's version report (Heartbeat's host_version and protocol fields),
// and the refusal itself (ProtocolRefusal, in a report or an error reply).
const Protocol = 7

// ProtocolRefusal says why a peer speaking protocol theirs is refused by
// this side (who: "this controller", "this host"), which speaks Protocol,
// and what to do: the host upgraded to the controller's release.
func ProtocolRefusal(theirs int, who string) string {
	return fmt.Sprintf("protocol %d refused: %s speaks protocol %d; upgrade the host with `mesh release roll` to the controller's release", theirs, who, Protocol)
}

// JoinRefusal says why a host joining with protocol theirs is refused by
// a controller that speaks Protocol, and what to do: a host not yet joined
// cannot be rolled, so it joins with the controller's own release.
func JoinRefusal(theirs int) string {
	return fmt.Sprintf("protocol %d refused: this controller speaks protocol %d; join with the controller's release of mesh (mesh version on the controller's machine names it)", theirs, Protocol)
}

// PeekProtocol reads the protocol field of a signed message (a declaration
// or a roster message) without decoding the rest, so that one of another
// protocol is refused for that, whatever else it holds: 0 when it holds
// none.
func PeekProtocol(raw []byte) int {
	var p struct {
		Protocol int `json:"protocol"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return 0
	}
	return p.Protocol
}

// Decode reads exactly one JSON value into v and refuses unknown fields and
// trailing data: a field one side sends and the other ignores is lost
// without a word, so it is refused instead.
func Decode(data []byte, v any) error {
	if d, ok := v.(*Declaration); ok {
		return decodeDeclaration(data, d) // in one pass
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
