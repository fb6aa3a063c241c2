package discovery

import (
	"context"
	"strings"

	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

// beatBeforeShortening heartbeats every action waiting under hook of group
// before a put shortens its HeartbeatTimeout: Auto Scaling applies the new
// timeout to the actions in flight, counted from their last heartbeat, and
// one last heartbeated longer ago than the new timeout would end at the put
// with its default result, a drain in flight cut (rule 3; found by the
// simulation's I3, seeds 2826 and 3376: 600 s lowered to 360 s under a
// drain). An instance waiting under another hook answers that no action is
// active, which is none of this hook's; a failure is left to the drain's own
// heartbeats, which it does not stop.
func beatBeforeShortening(ctx context.Context, api API, group, hook string) {
	waiting, err := Waiting(ctx, api, []string{group})
	if err != nil {
		return
	}
	for _, w := range waiting[group] {
		id, _, _ := strings.Cut(w, " ")
		_ = lifecycle.Heartbeat(ctx, api, lifecycle.Action{ASG: group, Hook: hook, InstanceID: id})
	}
}
