package spec

import (
	"fmt"
	"unicode/utf8"
)

// Limits on what a node sends. A node is not trusted: the controller caps
// what it keeps of a node's messages on receipt, so that no node can make
// an operator's answer too large to send, or the numbering of declarations
// run off the top of what the store keeps.
const (
	// MaxNodes is the fleet one controller admits: each node holds one
	// durable consumer on the declaration stream, and the stream's consumer
	// limit is set to it (nats-server's default is 1,000 per stream, which
	// would fail the thousandth join half-way). A token beyond it is refused
	// when it is made.
	MaxNodes = 10_000

	// MaxPayload is the bus's max_payload (the broker sets the same): no
	// message, and no API reply, can be larger.
	MaxPayload = 4 << 20

	// MaxReply caps an API reply's encoded bytes: under MaxPayload with
	// room for the headers and the envelope. A reply is built to fit (a
	// list is paged, a text is cut); one that would not fit is answered
	// with an error that says so, never left unsent.
	MaxReply = 3 << 20

	// MaxSeqAhead is how far above the last sequence sent to a node the
	// sequence it reports having applied may be and still be believed. A
	// store restored from an older copy has forgotten the pushes made
	// since (the next one is numbered past what the host applied, so the
	// host is never wedged); a million pushes is years of them. A claim
	// further ahead is the node's own failure: status names it, and it
	// never numbers a declaration, so a lying node cannot push the
	// numbering to the top of what the store keeps (SQLite keeps 2^63-1).
	MaxSeqAhead = 1 << 20

	// MaxReportText caps each text of a report as the controller keeps it
	// (the refusal, a result's name, kind, outcome, error and note),
	// counted in encoded JSON bytes: a character that encodes as \u003c
	// counts six. Real causes (an engine's or a filesystem's error) take a
	// few hundred bytes; past the cap the text is cut, and says so.
	MaxReportText = 2 << 10

	// MaxReportResults caps the results of a report the controller keeps.
	// A report has one result per resource declared or removed; a node of
	// a real fleet holds tens to hundreds. Past this count a report is a
	// flood, not an account: the results past it are dropped (failures
	// last) and counted, however small each is.
	MaxReportResults = 4096

	// MaxReportKept caps a report's encoded bytes as the controller keeps
	// and shows it: results past it are dropped (failures last) and
	// counted in Report.Omitted. About a thousand resources' results fit;
	// twelve such reports fit in one reply.
	MaxReportKept = 256 << 10

	// MaxFactText caps each text of a node's facts and heartbeat (a
	// hostname, a kernel, a CPU's model, a host version, an unreadable
	// fact's cause), in encoded JSON bytes.
	MaxFactText = 256

	// MaxFactList caps each list of a node's facts (capabilities, errors).
	MaxFactList = 32

	// MaxStatusFailures is how many failures of one node status lists,
	// and how many notes; the rest are counted, and mesh node show lists
	// them.
	MaxStatusFailures = 5

	// MaxStatusText caps each text status shows of a node's report (a
	// failure, a refusal), in encoded JSON bytes: status is the whole mesh
	// at a glance, and a few hundred nodes must fit one reply.
	MaxStatusText = 256

	// MaxStatusPublic is how many public names status lists: those
	// with a problem first, the rest counted. A name's line is a few
	// hundred bytes.
	MaxStatusPublic = 1024

	// MaxAuditText caps each text of an audit entry as mesh audit shows it
	// (its arguments, its outcome): a request may be as large as the bus
	// carries, and a thousand entries must fit one reply.
	MaxAuditText = 2 << 10
)

// encodedLen is how many bytes r takes inside a JSON string, as
// encoding/json writes it (escaping <, > and & for HTML).
func encodedLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6 // an invalid byte becomes \ufffd
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}

// EncodedLen is how many bytes s takes as a JSON string, quotes excluded.
func EncodedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += encodedLen(r, size)
		i += size
	}
	return n
}

// Clip returns s if it encodes as a JSON string in at most max bytes;
// otherwise its longest prefix, whole characters only, that fits with a
// marker saying how many bytes of s were cut ("…[1234 bytes cut]").
func Clip(s string, max int) string {
	if len(s) <= max/6 || EncodedLen(s) <= max {
		return s
	}
	// The marker is ASCII and escapes to itself but for the ellipsis,
	// which is 3 bytes of UTF-8.
	room := max - len(cutMark(len(s)))
	n, end := 0, 0
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		if n+encodedLen(r, size) > room {
			break
		}
		n += encodedLen(r, size)
		end += size
	}
	return s[:end] + cutMark(len(s)-end)
}

func cutMark(n int) string { return fmt.Sprintf("…[%d bytes cut]", n) }
