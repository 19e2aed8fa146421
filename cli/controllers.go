package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// roleWait is how long an operator gathers the controllers' roles.
const roleWait = time.Second

// reachableControllers says which controllers of a cluster answer on the
// bus and what each is, for an operator whose verb found no controller
// serving: empty when none answers (a controller alone, or none
// reachable).
func (o *Operator) reachableControllers() string {
	inbox := o.nc.NewRespInbox()
	sub, err := o.nc.SubscribeSync(inbox)
	if err != nil {
		return ""
	}
	defer sub.Unsubscribe()
	if err := o.nc.PublishRequest(spec.ControllerRoleSubject, inbox, nil); err != nil {
		return ""
	}
	var seen []string
	deadline := time.Now().Add(roleWait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil || msg.Header.Get("Status") == "503" {
			break // the wait is over, or the bus says none listens
		}
		var r spec.ControllerRole
		if spec.DecodeReply(msg.Data, &r) != nil || r.Server == "" {
			continue // the leader's controller, refusing the subject as a verb
		}
		seen = append(seen, fmt.Sprintf("%s (%s)", r.Server, r.Role))
	}
	if len(seen) == 0 {
		return ""
	}
	slices.Sort(seen)
	return fmt.Sprintf("; reachable controllers: %s, none leading (a leader needs most of the cluster's controllers up)", strings.Join(seen, ", "))
}
