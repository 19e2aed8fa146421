package spec

import "time"

// Verb is one API verb as both sides know it: an operator calls it on the
// subject APISubject(Name) with a Req and is answered a Res, and waits for
// the answer as long as Timeout (the controller may still carry the call
// out after). The controller's row for the verb and the CLI's call both
// take the Verb, so a handler or a caller written for other types than
// these does not compile.
type Verb[Req, Res any] struct {
	Name    string
	Timeout time.Duration
}

// Info is the verb without its types.
func (v Verb[Req, Res]) Info() VerbInfo { return VerbInfo(v) }

// VerbInfo is a verb without its request and result types, for what treats
// every verb alike: the listing, the audit, serving.
type VerbInfo struct {
	Name string
	// Timeout is how long a caller waits for the answer before it gives up.
	Timeout time.Duration
}

// DefaultVerbTimeout is how long a caller waits for most answers.
const DefaultVerbTimeout = 30 * time.Second

// The API verbs. Every one is listed in verbs below. A push answers once
// every node was sent its declaration, and a registration once its modules
// are stored, which on a large fleet, or against a store that is failing,
// takes a while.
var (
	NodeList    = Verb[NodeListRequest, NodeListResult]{"node.list", DefaultVerbTimeout}
	NodeShow    = Verb[NodeShowRequest, NodeShowResult]{"node.show", DefaultVerbTimeout}
	NodeRemove  = Verb[NodeRemoveRequest, NodeRemoveResult]{"node.remove", DefaultVerbTimeout}
	NodeHold    = Verb[HoldRequest, Empty]{"node.hold", DefaultVerbTimeout}
	TokenCreate = Verb[TokenCreateRequest, TokenCreateResult]{"token.create", DefaultVerbTimeout}
	TokenList   = Verb[TokenListRequest, TokenListResult]{"token.list", DefaultVerbTimeout}
	TokenRevoke = Verb[TokenRevokeRequest, Empty]{"token.revoke", DefaultVerbTimeout}
	// ClusterRemove waits for JetStream to drop the server from its
	// groups, which a cluster in flux takes a while to.
	ClusterRemove = Verb[ControllerRemoveRequest, ControllerRemoveResult]{"cluster.remove", DefaultVerbTimeout}

	ModuleRegister = Verb[ModuleRegisterRequest, ModuleRegisterResult]{"module.register", 2 * time.Minute}
	ModuleList     = Verb[ModuleListRequest, ModuleListResult]{"module.list", DefaultVerbTimeout}
	ModuleShow     = Verb[ModuleShowRequest, ModuleShowResult]{"module.show", DefaultVerbTimeout}
	ModuleRemove   = Verb[ModuleRemoveRequest, ModuleRemoveResult]{"module.remove", DefaultVerbTimeout}
	Assign         = Verb[AssignRequest, AssignResult]{"assign", DefaultVerbTimeout}
	Unassign       = Verb[AssignRequest, AssignResult]{"unassign", DefaultVerbTimeout}
	BlobPut        = Verb[BlobPutRequest, BlobPutResult]{"blob.put", DefaultVerbTimeout}
	GrantList      = Verb[GrantListRequest, GrantListResult]{"grant.list", DefaultVerbTimeout}
	GrantRotate    = Verb[GrantRotateRequest, GrantRotateResult]{"grant.rotate", DefaultVerbTimeout}
	// Push's answer says what was sent; each node's report then comes on
	// the request's Progress subject, as a PushEvent.
	Push   = Verb[PushRequest, PushResult]{"push", 2 * time.Minute}
	Status = Verb[StatusRequest, StatusResult]{"status", DefaultVerbTimeout}
	Audit  = Verb[AuditRequest, AuditResult]{"audit", DefaultVerbTimeout}

	CARoots      = Verb[CARootsRequest, CARootsResult]{"ca.roots", DefaultVerbTimeout}
	CADomainAdd  = Verb[CADomainAddRequest, CADomainAddResult]{"ca.domain.add", DefaultVerbTimeout}
	CADomainList = Verb[CADomainListRequest, CADomainListResult]{"ca.domain.list", DefaultVerbTimeout}
	CACerts      = Verb[CACertsRequest, CACertsResult]{"ca.certs", DefaultVerbTimeout}

	ReleasePublish = Verb[ReleasePublishRequest, ReleasePublishResult]{"release.publish", DefaultVerbTimeout}
	ReleaseList    = Verb[ReleaseListRequest, ReleaseListResult]{"release.list", DefaultVerbTimeout}
	ReleaseRoll    = Verb[ReleaseRollRequest, ReleaseRollResult]{"release.roll", DefaultVerbTimeout}
	RollResume     = Verb[ReleaseRollResumeRequest, ReleaseRollResult]{"release.roll.resume", DefaultVerbTimeout}
	RollAbort      = Verb[ReleaseRollAbortRequest, ReleaseRollResult]{"release.roll.abort", DefaultVerbTimeout}
	RollShow       = Verb[ReleaseRollShowRequest, ReleaseRollResult]{"release.roll.show", DefaultVerbTimeout}

	OverlayEnable  = Verb[OverlayEnableRequest, OverlayEnableResult]{"overlay.enable", DefaultVerbTimeout}
	OverlayDisable = Verb[OverlayDisableRequest, OverlayDisableResult]{"overlay.disable", DefaultVerbTimeout}
	OverlayShow    = Verb[OverlayShowRequest, OverlayShowResult]{"overlay.show", DefaultVerbTimeout}

	UILogin = Verb[UILoginRequest, UILoginResult]{"ui.login", DefaultVerbTimeout}
	UIToken = Verb[UITokenRequest, UITokenResult]{"ui.token", DefaultVerbTimeout}
)

// verbs is every verb, in one place; TestEveryVerbIsDescribed fails for a
// Verb this package declares and leaves out here.
var verbs = []VerbInfo{
	NodeList.Info(),
	NodeShow.Info(),
	NodeRemove.Info(),
	NodeHold.Info(),
	TokenCreate.Info(),
	TokenList.Info(),
	TokenRevoke.Info(),
	ClusterRemove.Info(),
	ModuleRegister.Info(),
	ModuleList.Info(),
	ModuleShow.Info(),
	ModuleRemove.Info(),
	Assign.Info(),
	Unassign.Info(),
	BlobPut.Info(),
	GrantList.Info(),
	GrantRotate.Info(),
	Push.Info(),
	Status.Info(),
	Audit.Info(),
	CARoots.Info(),
	CADomainAdd.Info(),
	CADomainList.Info(),
	CACerts.Info(),
	ReleasePublish.Info(),
	ReleaseList.Info(),
	ReleaseRoll.Info(),
	RollResume.Info(),
	RollAbort.Info(),
	RollShow.Info(),
	OverlayEnable.Info(),
	OverlayDisable.Info(),
	OverlayShow.Info(),
	UILogin.Info(),
	UIToken.Info(),
}

// Verbs lists every API verb.
func Verbs() []VerbInfo { return append([]VerbInfo(nil), verbs...) }

// LookupVerb is the verb called name, and false for a name no verb has.
func LookupVerb(name string) (VerbInfo, bool) {
	for _, v := range verbs {
		if v.Name == name {
			return v, true
		}
	}
	return VerbInfo{}, false
}
