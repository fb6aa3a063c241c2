package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
)

// An uninstall removes the deployment's hooks even where an instance
// waits under one once its wait is over (here none: the invocation's 5 s
// leave no time to wait, drainWaitBound), and says each action it cut:
// the deletion completed it (rule 17).
func TestStackDeleteSaysWhichDrainsItCut(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{waitingIn(taggedGroup("draining", "true"), idA, astypes.LifecycleStateTerminatingWait), taggedGroup("idle", "true")}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
		"draining": {markedBy("node-drainer-terminate", "node-drainer")}, "idle": {markedBy("node-drainer-terminate", "node-drainer")},
	}}
	h := deployment(e, hp, "node-drainer", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := h.Serve(ctx, terraformPayload(t, "delete", hookProps()))
	if err != nil || len(hp.Deletes) != 2 {
		t.Fatalf("delete: %+v, %v, deleted %v; want both hooks removed", out, err, hp.Deletes)
	}
	if !strings.Contains(out.Detail, "cut draining/node-drainer-terminate: "+idA+" in Terminating:Wait") || strings.Contains(out.Detail, "cut idle") {
		t.Errorf("delete said %q; want the drain it cut on draining named, none on idle", out.Detail)
	}
}

// otherClusters is a group carrying the deployment's tag that names
// another cluster in its own tags: another deployment's.
func otherClusters(name string) astypes.AutoScalingGroup {
	g := taggedGroup(name, "true")
	g.Tags = append(g.Tags, astypes.TagDescription{Key: aws.String("kubernetes.io/cluster/other"), Value: aws.String("owned"), ResourceId: aws.String(name)})
	return g
}

// A stack Update puts the hooks on the tagged groups that are this
// cluster's, as the sweep does (groupTag), never on one carrying the tag
// that names another cluster: its events would be left to that cluster's
// deployment, and every scale-in there would wait out the hook's timeout.
func TestStackUpdatePutsNoHookOnAnotherClustersGroup(t *testing.T) {
	srv := newCFNServer(t)
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, taggedGroup("ours", "true"), otherClusters("theirs")}
	hp := &hookstest.AutoScaling{Groups: e.asg}
	h := deployment(e, hp, "node-drainer", nil)
	longer := hookProps("blue")
	longer["HeartbeatTimeout"] = "600"
	if r := cfnCall(t, h, srv, cfn.RequestUpdate, longer, hookProps("blue")); r.Status != cfn.StatusSuccess {
		t.Fatalf("update: %s %q", r.Status, r.Reason)
	}
	if got := hp.HookNames("theirs"); len(got) != 0 {
		t.Errorf("another cluster's tagged group got %v on an update; want no hook", got)
	}
	for _, g := range []string{"blue", "ours"} {
		if got := hp.HookNames(g); !slices.Equal(got, []string{"node-drainer-terminate"}) {
			t.Errorf("%s has %v; want our hook", g, got)
		}
	}
}

// Create puts the hooks on the tagged groups of this cluster too, as an
// Update does: with tag selection and no sweep (SweepSchedule empty), a
// fresh install would otherwise hook no tagged group until its first
// update, and every scale-in there would go undrained. SAM's custom
// resource and terraform's invocation alike.
func TestStackCreatePutsHooksOnTaggedGroups(t *testing.T) {
	for _, path := range []string{"sam", "terraform"} {
		t.Run(path, func(t *testing.T) {
			srv := newCFNServer(t)
			e := newEnv()
			e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, taggedGroup("ours", "true"), otherClusters("theirs"), taggedGroup("off", "false")}
			hp := &hookstest.AutoScaling{Groups: e.asg}
			h := deployment(e, hp, "node-drainer", nil)
			if path == "sam" {
				if r := cfnCall(t, h, srv, cfn.RequestCreate, hookProps("blue"), nil); r.Status != cfn.StatusSuccess {
					t.Fatalf("create: %s %q", r.Status, r.Reason)
				}
			} else if out, err := h.Serve(context.Background(), terraformPayload(t, "create", hookProps())); err != nil {
				t.Fatalf("create: %+v, %v", out, err)
			}
			if got := hp.HookNames("ours"); !slices.Equal(got, []string{"node-drainer-terminate"}) || aws.ToString(hp.Have["ours"][0].NotificationMetadata) != `{"node-drainer":["node-drainer"]}` {
				t.Errorf("create left the tagged group with %v (%+v); want our hook, marked ours", got, hp.Have["ours"])
			}
			if len(hp.HookNames("theirs")) != 0 || len(hp.HookNames("off")) != 0 {
				t.Errorf("create put %v on another cluster's group, %v on another value's; want none", hp.HookNames("theirs"), hp.HookNames("off"))
			}
		})
	}
}

// terraformUpdate is aws_lambda_invocation's update: props, with the
// previous input (old) under "tf".
func terraformUpdate(t *testing.T, old, props map[string]any) []byte {
	t.Helper()
	var m, prev map[string]any
	if err := json.Unmarshal(terraformPayload(t, "update", props), &m); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(terraformPayload(t, "create", old), &prev); err != nil {
		t.Fatal(err)
	}
	delete(prev, "tf")
	m["tf"].(map[string]any)["prev_input"] = prev
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The release step (an update's first, before the grants change) that
// cannot remove a leaving group's hook, or cannot read the groups, fails:
// SAM's answer FAILED (the stack rolls back, the old grants kept, and the
// next update tries again), terraform's invocation an error (the apply
// fails before the grant is narrowed). A success would narrow the grant
// over a hook the function then could never remove: every scale-in of the
// group would wait out its timeout.
func TestStackReleaseStepFailsWhenAHookStays(t *testing.T) {
	release := func(p map[string]any) map[string]any { p["Release"] = "true"; return p }
	for _, tc := range []struct {
		name       string
		deleteErr  error
		describe   error
		wantReason string
	}{
		{"a hook not removed", errors.New("Throttling: rate exceeded"), nil, "green"},
		{"the groups unread", nil, errors.New("Throttling: rate exceeded"), "Throttling"},
	} {
		t.Run("sam/"+tc.name, func(t *testing.T) {
			srv := newCFNServer(t)
			e := newEnv()
			e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, {AutoScalingGroupName: aws.String("green")}}
			hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"green": {markedBy("node-drainer-terminate", "node-drainer")}}, DeleteErr: tc.deleteErr}
			e.asg.describeErr = tc.describe
			h := deployment(e, hp, "node-drainer", nil)
			r := cfnCall(t, h, srv, cfn.RequestUpdate, release(hookProps("blue")), release(hookProps("blue", "green")))
			if r.Status != cfn.StatusFailed || !strings.Contains(r.Reason, tc.wantReason) {
				t.Errorf("release step, %s: %s %q; want FAILED saying %q", tc.name, r.Status, r.Reason, tc.wantReason)
			}
		})
		t.Run("terraform/"+tc.name, func(t *testing.T) {
			e := newEnv()
			e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("green", "true")}
			hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"green": {markedBy("node-drainer-terminate", "node-drainer")}}, DeleteErr: tc.deleteErr}
			e.asg.describeErr = tc.describe
			h := deployment(e, hp, "node-drainer", nil)
			moved := release(hookProps())
			moved["AsgTagValue"] = "blue-team" // green leaves the deployment
			out, err := h.Serve(context.Background(), terraformUpdate(t, release(hookProps()), moved))
			if err == nil || !strings.Contains(err.Error(), tc.wantReason) {
				t.Errorf("release step, %s: %+v, %v; want an error saying %q (the apply fails)", tc.name, out, err, tc.wantReason)
			}
		})
	}
}
