package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// roleWait is how long an operator gathers the controllers' roles;
// electionWait is how long a verb no controller served is sent again
// while most of the cluster's controllers answer, so one will lead soon.
const (
	roleWait     = time.Second
	electionWait = 20 * time.Second
)

// controllerRoles are the answers of the controllers of a cluster
// reachable on the bus: none for a controller alone, or none reachable.
func (o *Operator) controllerRoles() []spec.ControllerRole {
	inbox := o.nc.NewRespInbox()
	sub, err := o.nc.SubscribeSync(inbox)
	if err != nil {
		return nil
	}
	defer sub.Unsubscribe()
	if err := o.nc.PublishRequest(spec.ControllerRoleSubject, inbox, nil); err != nil {
		return nil
	}
	var roles []spec.ControllerRole
	deadline := time.Now().Add(roleWait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil || msg.Header.Get("Status") == "503" {
			break // the wait is over, or the bus says none listens
		}
		var r spec.ControllerRole
		if spec.DecodeReply(msg.Data, &r) != nil || r.Server == "" {
			continue // not a controller's role: nothing to name
		}
		roles = append(roles, r)
	}
	return roles
}

// electing says whether most of the cluster's controllers answered: a
// leader is being chosen or starting, and a verb sent again soon is
// served.
func electing(roles []spec.ControllerRole) bool {
	peers := 0
	for _, r := range roles {
		peers = max(peers, r.Peers)
	}
	return len(roles) > 0 && len(roles) > peers/2
}

// reachable says which controllers answered and what each is, for an
// operator whose verb found no controller serving.
func reachable(roles []spec.ControllerRole) string {
	if len(roles) == 0 {
		return ""
	}
	var seen []string
	peers := 0
	for _, r := range roles {
		seen = append(seen, fmt.Sprintf("%s (%s)", shown(r.Server), shown(r.Role)))
		peers = max(peers, r.Peers)
	}
	slices.Sort(seen)
	return fmt.Sprintf("; reachable controllers: %s of %d, none leading (a leader needs most of the cluster's controllers up: start the others)", strings.Join(seen, ", "), peers)
}
