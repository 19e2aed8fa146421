package spec_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// kinded is an error that names its kind, as the controller's own do.
type kinded struct{ kind, msg string }

func (e kinded) Error() string     { return e.msg }
func (e kinded) ReplyKind() string { return e.kind }

// TestReplyCarriesItsKind: an error encoded with a kind (wrapped or not)
// is read back as a *ReplyError of that kind with its words unchanged; a
// plain error, a kind this side does not know and a reply without a kind
// (an older controller's) are failures; a result is read back as sent.
func TestReplyCarriesItsKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		err      error
		kind     string
		wire     string
		wrongly  bool
		withWire bool
	}{
		{"caller", kinded{spec.ReplyCaller, "node.show: malformed request: x"}, spec.ReplyCaller, `{"error":"node.show: malformed request: x","kind":"caller"}`, true, true},
		{"not found", kinded{spec.ReplyNotFound, `no node called "x"`}, spec.ReplyNotFound, `{"error":"no node called \"x\"","kind":"not_found"}`, true, true},
		{"refused", kinded{spec.ReplyRefused, "token t1 was already used"}, spec.ReplyRefused, `{"error":"token t1 was already used","kind":"refused"}`, false, true},
		{"failed, said", kinded{spec.ReplyFailed, "disk full"}, spec.ReplyFailed, `{"error":"disk full"}`, false, true},
		{"plain error", errors.New("database is locked"), spec.ReplyFailed, `{"error":"database is locked"}`, false, true},
		{"wrapped", fmt.Errorf("push: %w", kinded{spec.ReplyNotFound, "no node called \"x\""}), spec.ReplyNotFound, "", true, false},
		{"unknown kind named", kinded{"weird", "w"}, spec.ReplyFailed, `{"error":"w"}`, false, true},
		{"passed on", &spec.ReplyError{Kind: spec.ReplyRefused, Message: "held"}, spec.ReplyRefused, `{"error":"held","kind":"refused"}`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := spec.EncodeReply(nil, tc.err)
			if tc.withWire && string(body) != tc.wire {
				t.Errorf("on the wire %s, want %s", body, tc.wire)
			}
			err := spec.DecodeReply(body, nil)
			var re *spec.ReplyError
			if !errors.As(err, &re) || re.Kind != tc.kind || re.Message != tc.err.Error() || re.Error() != tc.err.Error() || re.CalledWrongly() != tc.wrongly {
				t.Fatalf("read back %#v (%v), want kind %s, message %q, called wrongly %v", re, err, tc.kind, tc.err.Error(), tc.wrongly)
			}
		})
	}
	// Read from the wire as an older or newer controller writes it.
	for wire, kind := range map[string]string{
		`{"error":"no node called \"x\""}`:          spec.ReplyFailed, // before kinds
		`{"error":"x","kind":"from_the_future"}`:    spec.ReplyFailed,
		`{"error":"x","kind":"not_found"}`:          spec.ReplyNotFound,
		`{"error":"x","kind":"failed"}`:             spec.ReplyFailed,
		`{"error":"x","kind":"caller","result":{}}`: spec.ReplyCaller, // an error wins
	} {
		var re *spec.ReplyError
		if err := spec.DecodeReply([]byte(wire), nil); !errors.As(err, &re) || re.Kind != kind {
			t.Errorf("%s read as %v, want kind %s", wire, err, kind)
		}
	}
	// A result.
	var got spec.NodeShowResult
	want := spec.NodeShowResult{Node: spec.Node{Name: "alpha", Address: "10.0.0.1"}}
	if err := spec.DecodeReply(spec.EncodeReply(want, nil), &got); err != nil || got.Node.Name != "alpha" || got.Node.Address != "10.0.0.1" {
		t.Fatalf("result read back as %+v (%v)", got, err)
	}
	// Not a reply, or not the result asked for: an error that is no ReplyError.
	for wire, says := range map[string]string{
		`{"error":"x","extra":1}`:         "the controller's reply: ",
		`{"kind":"caller"}`:               "an error kind (\"caller\") without an error",
		`nonsense`:                        "the controller's reply: ",
		`{"result":{"node":{},"more":1}}`: "the controller's result: ",
		`{}`:                              "the controller's result: ",
	} {
		err := spec.DecodeReply([]byte(wire), &got)
		var re *spec.ReplyError
		if err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s read as %v, want an error saying %q", wire, err, says)
		}
	}
	// An error without words is still an error.
	if err := spec.DecodeReply(spec.EncodeReply(nil, kinded{spec.ReplyCaller, ""}), nil); err == nil {
		t.Error("an error with no message was read as a success")
	}
	// A result that does not encode is the controller's failure.
	var re *spec.ReplyError
	if err := spec.DecodeReply(spec.EncodeReply(func() {}, nil), nil); !errors.As(err, &re) || re.Kind != spec.ReplyFailed || !strings.Contains(re.Message, "encode the result") {
		t.Errorf("an unencodable result read as %v", err)
	}
}

// FuzzDecodeReply: the reply decoder never panics; what it accepts it
// reads the same again once re-encoded, an error's kind is always one of
// the four and its words are kept.
func FuzzDecodeReply(f *testing.F) {
	for _, seed := range []string{
		`{"result":{"node":{"name":"alpha"}}}`,
		`{"result":null}`,
		`{"result":[1,2,3]}`,
		`{"error":"no node called \"x\"","kind":"not_found"}`,
		`{"error":"token t1 was already used","kind":"refused"}`,
		`{"error":"bad","kind":"caller"}`,
		`{"error":"disk full"}`,
		`{"error":"x","kind":"other"}`,
		`{"kind":"caller"}`,
		`{"error":"","kind":"failed"}`,
		`{"error":"x","result":{}}`,
		`{"error":"x"} {}`,
		`{"error":1}`,
		`{"extra":true}`,
		`{}`,
		`null`,
		`[`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var res json.RawMessage
		err := spec.DecodeReply(data, &res)
		var re *spec.ReplyError
		switch {
		case err == nil:
			var again json.RawMessage
			if err := spec.DecodeReply(spec.EncodeReply(res, nil), &again); err != nil || !sameJSON(res, again) {
				t.Fatalf("%q: result %s re-encoded reads as %s (%v)", data, res, again, err)
			}
		case errors.As(err, &re):
			switch re.Kind {
			case spec.ReplyCaller, spec.ReplyNotFound, spec.ReplyRefused, spec.ReplyFailed:
			default:
				t.Fatalf("%q: kind %q", data, re.Kind)
			}
			if re.Message == "" {
				t.Fatalf("%q: an error without words", data)
			}
			var re2 *spec.ReplyError
			if err := spec.DecodeReply(spec.EncodeReply(nil, re), nil); !errors.As(err, &re2) || *re2 != *re {
				t.Fatalf("%q: error %#v re-encoded reads as %v", data, re, err)
			}
		}
	})
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}
