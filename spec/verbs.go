package spec

import "time"

// API verbs: an operator calls verb on the subject APISubject(verb). Every
// verb is listed in verbs below, with how long a caller waits for its
// answer; the controller serves each from one row of its own table, which
// adds the handler and how the audit keeps the call's arguments.
const (
	VerbNodeList    = "node.list"
	VerbNodeShow    = "node.show"
	VerbNodeRemove  = "node.remove"
	VerbTokenCreate = "token.create"
	VerbTokenList   = "token.list"
	VerbTokenRevoke = "token.revoke"

	VerbModuleRegister = "module.register"
	VerbModuleList     = "module.list"
	VerbModuleShow     = "module.show"
	VerbModuleRemove   = "module.remove"
	VerbAssign         = "assign"
	VerbUnassign       = "unassign"
	VerbBlobPut        = "blob.put"
	VerbPush           = "push"
	VerbHold           = "node.hold"
	VerbStatus         = "status"
	VerbAudit          = "audit"
	VerbCARoots        = "ca.roots"
	VerbCADomainAdd    = "ca.domain.add"
	VerbCADomainList   = "ca.domain.list"
	VerbCACerts        = "ca.certs"

	VerbReleasePublish = "release.publish"
	VerbReleaseList    = "release.list"
	VerbReleaseRoll    = "release.roll"
	VerbRollResume     = "release.roll.resume"
	VerbRollAbort      = "release.roll.abort"
	VerbRollShow       = "release.roll.show"
)

// Verb describes one API verb as both sides know it.
type Verb struct {
	Name string
	// Timeout is how long a caller waits for the answer before it gives up
	// (the controller may still carry the call out).
	Timeout time.Duration
}

// DefaultVerbTimeout is how long a caller waits for most answers.
const DefaultVerbTimeout = 30 * time.Second

// verbs is every verb, in one place. A push answers once every node was
// sent its declaration, and a registration once its modules are stored,
// which on a large fleet, or against a store that is failing, takes a while.
var verbs = []Verb{
	{VerbNodeList, DefaultVerbTimeout},
	{VerbNodeShow, DefaultVerbTimeout},
	{VerbNodeRemove, DefaultVerbTimeout},
	{VerbTokenCreate, DefaultVerbTimeout},
	{VerbTokenList, DefaultVerbTimeout},
	{VerbTokenRevoke, DefaultVerbTimeout},
	{VerbModuleRegister, 2 * time.Minute},
	{VerbModuleList, DefaultVerbTimeout},
	{VerbModuleShow, DefaultVerbTimeout},
	{VerbModuleRemove, DefaultVerbTimeout},
	{VerbAssign, DefaultVerbTimeout},
	{VerbUnassign, DefaultVerbTimeout},
	{VerbBlobPut, DefaultVerbTimeout},
	{VerbPush, 2 * time.Minute},
	{VerbHold, DefaultVerbTimeout},
	{VerbStatus, DefaultVerbTimeout},
	{VerbAudit, DefaultVerbTimeout},
	{VerbCARoots, DefaultVerbTimeout},
	{VerbCADomainAdd, DefaultVerbTimeout},
	{VerbCADomainList, DefaultVerbTimeout},
	{VerbCACerts, DefaultVerbTimeout},
	{VerbReleasePublish, DefaultVerbTimeout},
	{VerbReleaseList, DefaultVerbTimeout},
	{VerbReleaseRoll, DefaultVerbTimeout},
	{VerbRollResume, DefaultVerbTimeout},
	{VerbRollAbort, DefaultVerbTimeout},
	{VerbRollShow, DefaultVerbTimeout},
}

// Verbs lists every API verb.
func Verbs() []Verb { return append([]Verb(nil), verbs...) }

// LookupVerb is the verb called name, and false for a name no verb has.
func LookupVerb(name string) (Verb, bool) {
	for _, v := range verbs {
		if v.Name == name {
			return v, true
		}
	}
	return Verb{}, false
}
