package spec

import "strings"

// Subjects on the bus. Every subject a node may touch is derived here, and the
// permissions the broker enforces come from the same functions, so the two
// cannot drift apart.
const (
	// APIPrefix starts every operator API subject: mesh.api.v1.<verb>.
	APIPrefix = "mesh.api.v1."
	// EnrolSubject is the one subject a joining host's enrolment user may publish.
	EnrolSubject = "mesh.enrol"
	// ClusterPeersSubject carries the controllers' peer set after a
	// controller joined: only a controller's full user may publish or
	// subscribe to it.
	ClusterPeersSubject = "mesh.cluster.peers"
	// OperatorInbox is the inbox prefix of operator clients (nats.go CustomInboxPrefix).
	OperatorInbox = "_OPERATOR"
)

// Kinds of message a node publishes under its own subjects.
const (
	KindHeartbeat = "heartbeat"
	KindFacts     = "facts"
	KindReport    = "report" // also a preview's answer, with Preview set
	KindBlob      = "blob"
	KindCSR       = "csr"    // a certificate signing request (cert.go)
	KindRoster    = "roster" // a request for the current roster message (roster.go)
	// KindDeclaration is a request for the node's last declaration
	// (DeclarationRequest), which a host makes each time it connects.
	KindDeclaration = "declaration"
)

// APISubject is the subject an operator calls for verb.
func APISubject(verb string) string { return APIPrefix + verb }

// NodeSubject is the subject on which node publishes a message of kind.
func NodeSubject(node, kind string) string { return "mesh.node." + node + "." + kind }

// NodeFromSubject returns the node and kind of a mesh.node.<node>.<kind>
// subject, and false for any other subject.
func NodeFromSubject(subject string) (node, kind string, ok bool) {
	rest, found := strings.CutPrefix(subject, "mesh.node.")
	if !found {
		return "", "", false
	}
	node, kind, found = strings.Cut(rest, ".")
	if !found || node == "" || kind == "" {
		return "", "", false
	}
	return node, kind, true
}

// DeclarationStream is the JetStream stream that carries declarations.
const DeclarationStream = "DECLARATIONS"

// DeclarationSubject is the stream subject of node's declarations; only the
// controller publishes there.
func DeclarationSubject(node string) string { return "mesh.decl." + node }

// RosterSubject is the stream subject of the mesh's roster messages
// (RosterDoc and RosterDelta); only the controller publishes there. The
// stream republishes each, once stored, on RosterDelivery.
const RosterSubject = "mesh.roster"

// Republished is where the stream republishes each message once it stored
// it (with the headers it was published with): the subject it was
// published on, under the stream's delivery prefix. A host's plain
// subscription takes it there: one copy a host, and no consumer state.
func Republished(subject string) string { return "_DELIVER." + DeclarationStream + "." + subject }

// RosterDelivery is where the stream republishes the roster messages, to
// every host.
var RosterDelivery = Republished(RosterSubject)

// DeclarationDelivery is where the stream republishes node's declarations,
// to node's host alone.
func DeclarationDelivery(node string) string { return Republished(DeclarationSubject(node)) }

// PreviewSubject is where a node receives dry-run declarations (mode
// preview): never stored, acked or applied.
func PreviewSubject(node string) string { return "mesh.preview." + node }

// NodeInbox is the inbox prefix of node's bus connection.
func NodeInbox(node string) string { return "_INBOX." + node }

// ReportAckSubject is where node's host hears the answers to its reports
// (ReportAck): under its own inbox, where only it may listen.
func ReportAckSubject(node string) string { return NodeInbox(node) + ".report" }

// Permissions are what one bus user may publish and subscribe to. Anything
// not listed is denied.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// NodePermissions is everything node may do on the bus: publish under its
// own subjects, receive what the stream republishes to it and replies on
// its own inbox. It holds no $JS permission: it reads the stream only
// through the controller.
func NodePermissions(node string) Permissions {
	return Permissions{
		Publish:   []string{"mesh.node." + node + ".>"},
		Subscribe: []string{DeclarationDelivery(node), RosterDelivery, PreviewSubject(node), NodeInbox(node) + ".>"},
	}
}

// OperatorPermissions is everything the operator's credential may do: call
// the API and receive its replies.
func OperatorPermissions() Permissions {
	return Permissions{
		Publish:   []string{APIPrefix + ">"},
		Subscribe: []string{OperatorInbox + ".>"},
	}
}

// ControllerServePermissions is everything the controller's serving
// connection may do: receive the requests and messages it serves, and
// publish only under inboxes (nodes', enrolments', the operator's), so that
// an answer a bug would send elsewhere is denied by the bus itself. The
// controller publishes declarations and previews, and manages the stream,
// on another connection, which serves nothing.
func ControllerServePermissions() Permissions {
	return Permissions{
		Publish: []string{"_INBOX.>", OperatorInbox + ".>"},
		Subscribe: []string{APIPrefix + ">", EnrolSubject,
			NodeSubject("*", KindHeartbeat), NodeSubject("*", KindFacts),
			NodeSubject("*", KindReport), NodeSubject("*", KindBlob), NodeSubject("*", KindCSR),
			NodeSubject("*", KindRoster), NodeSubject("*", KindDeclaration), NodeSubject("*", KindOverlay),
			NodeSubject("*", KindEdgeState)},
	}
}
