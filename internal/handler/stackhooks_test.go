package handler

import (
	"context"
	"strings"
	"testing"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// An uninstall removes the deployment's hooks even where an instance
// waits under one (the operator's removal: docs/deploy.md asks that the
// drains end first), and says each action it cut: the deletion completed
// it (rule 17).
func TestStackDeleteSaysWhichDrainsItCut(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait), taggedGroup("idle", "true")}
	hp := &hookPutter{fakeASG: e.asg, have: map[string][]astypes.LifecycleHook{
		"draining": {markedBy("node-drainer-terminate", "node-drainer")}, "idle": {markedBy("node-drainer-terminate", "node-drainer")},
	}}
	h := deployment(e, hp, "node-drainer", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := h.Handle(ctx, terraformPayload(t, "delete", hookProps()))
	if err != nil || len(hp.deletes) != 2 {
		t.Fatalf("delete: %+v, %v, deleted %v; want both hooks removed", out, err, hp.deletes)
	}
	if !strings.Contains(out.Detail, "cut draining/node-drainer-terminate: "+idA+" in Terminating:Wait") || strings.Contains(out.Detail, "cut idle") {
		t.Errorf("delete said %q; want the drain it cut on draining named, none on idle", out.Detail)
	}
}
