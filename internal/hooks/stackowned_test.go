package hooks

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/hooks/hookstest"
)

// cfnCall sends h a custom resource request and returns its answer.
func cfnCall(t *testing.T, h *Keeper, srv *cfnServer, kind cfn.RequestType, props, old map[string]any) cfn.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := h.Serve(ctx, stackPayload(t, srv.URL, kind, props, old)); err != nil {
		t.Fatalf("%s: %+v, %v", kind, out, err)
	}
	select {
	case r := <-srv.answers:
		return r
	default:
		t.Fatalf("%s: no answer", kind)
		return cfn.Response{}
	}
}

// TestStackUpdateKeepsTheHooksStillOurs: a stack update removes only what
// the old deployment had that the new one does not. A group moved from
// AsgNames to the tag keeps its hook (removing it would end the drain in
// flight under it, the instance terminated mid-drain); a renamed hook is
// put under its new name on every group of the deployment, listed and
// tagged, before the old name is removed from it, so that no group is
// left without a hook of ours.
func TestStackUpdateKeepsTheHooksStillOurs(t *testing.T) {
	srv := newCFNServer(t)
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("blue", "true"), taggedGroup("green", "true"), {AutoScalingGroupName: aws.String("red")}}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
		"green": {markedBy("node-drainer-terminate", "node-drainer"), {LifecycleHookName: aws.String("nth-terminate")}}, // the sweep's
	}}
	h := deployment(e, hp, "node-drainer", nil)
	if r := cfnCall(t, h, srv, cfn.RequestCreate, hookProps("blue", "red"), nil); r.Status != cfn.StatusSuccess {
		t.Fatalf("create: %s %q", r.Status, r.Reason)
	}
	hp.Deletes = nil
	// blue goes from the list to the tag, which it carries
	if r := cfnCall(t, h, srv, cfn.RequestUpdate, hookProps("red"), hookProps("blue", "red")); r.Status != cfn.StatusSuccess {
		t.Fatalf("update: %s %q", r.Status, r.Reason)
	}
	if len(hp.Deletes) != 0 || !slices.Equal(hp.HookNames("blue"), []string{"node-drainer-terminate"}) {
		t.Errorf("blue moved to the tag: deleted %v, blue has %v; want its hook kept (a drain under it would end)", hp.Deletes, hp.HookNames("blue"))
	}

	renamed := hookProps("red")
	renamed["TerminateHookName"] = "drainer-terminate"
	hp.Calls = nil
	if r := cfnCall(t, h, srv, cfn.RequestUpdate, renamed, hookProps("red")); r.Status != cfn.StatusSuccess {
		t.Fatalf("rename: %s %q", r.Status, r.Reason)
	}
	for _, g := range []string{"blue", "green", "red"} {
		want := []string{"drainer-terminate"}
		if g == "green" {
			want = []string{"drainer-terminate", "nth-terminate"}
		}
		if got := hp.HookNames(g); !slices.Equal(got, want) {
			t.Errorf("after the rename %s has %v, want %v", g, got, want)
		}
		put, del := slices.Index(hp.Calls, "put "+g+"/drainer-terminate"), slices.Index(hp.Calls, "delete "+g+"/node-drainer-terminate")
		if put < 0 || del < 0 || put > del {
			t.Errorf("%s: calls %v; want the new name put before the old one is removed", g, hp.Calls)
		}
	}
}

// TestStackDeleteRemovesOnlyWhatItPut: a stack's Delete removes only the
// hooks its deployment put. A second stack listing the same group (a new
// install beside the old one) is refused at its Create, naming the
// deployment whose hook is there (two deployments cannot share a hook),
// and changes nothing: not the listed group's hook, nor the tagged ones',
// which it says it left. Its rollback, and its Delete after a Create that
// failed on a missing group, leave the first one's hooks; the first one's
// Delete then removes them, never another tool's hook nor a hook of our
// name no deployment put.
func TestStackDeleteRemovesOnlyWhatItPut(t *testing.T) {
	srv := newCFNServer(t)
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, taggedGroup("tagged", "true"), taggedGroup("by-hand", "true")}
	byHand := astypes.LifecycleHook{LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE")}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
		"blue":    {{LifecycleHookName: aws.String("nth-terminate")}},
		"tagged":  {markedBy("node-drainer-terminate", "drainer-a")},
		"by-hand": {byHand},
	}}
	a, b := deployment(e, hp, "drainer-a", nil), deployment(e, hp, "drainer-b", nil)
	ours := []string{"node-drainer-terminate", "nth-terminate"}
	if r := cfnCall(t, a, srv, cfn.RequestCreate, hookProps("blue"), nil); r.Status != cfn.StatusSuccess || !slices.Equal(hp.HookNames("blue"), ours) {
		t.Fatalf("a's create: %s %q, blue has %v", r.Status, r.Reason, hp.HookNames("blue"))
	}
	aMark := aws.ToString(hp.Have["blue"][1].NotificationMetadata)
	if r := cfnCall(t, b, srv, cfn.RequestCreate, hookProps("blue", "missing"), nil); r.Status != cfn.StatusFailed {
		t.Fatalf("b's create with a missing group: %s", r.Status)
	}
	if r := cfnCall(t, b, srv, cfn.RequestDelete, hookProps("blue", "missing"), nil); r.Status != cfn.StatusSuccess {
		t.Fatalf("b's rollback: %s %q", r.Status, r.Reason)
	}
	if !slices.Equal(hp.HookNames("blue"), ours) || len(hp.HookNames("tagged")) != 1 {
		t.Errorf("b's create rolled back removed a's hooks: blue %v, tagged %v", hp.HookNames("blue"), hp.HookNames("tagged"))
	}
	hp.Calls = nil
	r := cfnCall(t, b, srv, cfn.RequestCreate, hookProps("blue"), nil)
	refused := "hook node-drainer-terminate on group blue belongs to deployment drainer-a: two deployments cannot share a hook; " +
		"give one of them other hook names (TerminateHookName/LaunchHookName) or remove the other first"
	if r.Status != cfn.StatusFailed || !strings.Contains(r.Reason, refused) || strings.Contains(r.Reason, "tagged") {
		t.Errorf("b's create over a's hook: %s %q; want FAILED: %q (the tagged groups said, not failed)", r.Status, r.Reason, refused)
	}
	if len(hp.Calls) != 0 || aws.ToString(hp.Have["blue"][1].NotificationMetadata) != aMark ||
		!reflect.DeepEqual(hp.Have["by-hand"], []astypes.LifecycleHook{byHand}) {
		t.Errorf("b's refused create wrote: calls %v, blue's mark %s, by-hand %+v", hp.Calls, aws.ToString(hp.Have["blue"][1].NotificationMetadata), hp.Have["by-hand"])
	}
	if r := cfnCall(t, b, srv, cfn.RequestDelete, hookProps("blue"), nil); r.Status != cfn.StatusSuccess {
		t.Fatalf("b's rollback: %s %q", r.Status, r.Reason)
	}
	if !slices.Equal(hp.HookNames("blue"), ours) || len(hp.HookNames("tagged")) != 1 {
		t.Errorf("b's delete removed a's hooks: blue %v, tagged %v", hp.HookNames("blue"), hp.HookNames("tagged"))
	}
	if r := cfnCall(t, a, srv, cfn.RequestDelete, hookProps("blue"), nil); r.Status != cfn.StatusSuccess {
		t.Fatalf("a's delete: %s %q", r.Status, r.Reason)
	}
	if got := hp.HookNames("blue"); !slices.Equal(got, []string{"nth-terminate"}) || len(hp.HookNames("tagged")) != 0 {
		t.Errorf("a's delete left blue %v, tagged %v; want nth's hook alone, nothing on tagged", got, hp.HookNames("tagged"))
	}
	if !reflect.DeepEqual(hp.Have["by-hand"], []astypes.LifecycleHook{byHand}) {
		t.Errorf("a hook of our name no deployment put was changed or removed: by-hand has %+v", hp.Have["by-hand"])
	}
}

// TestSweepPutsNoHookBackOnceRemoved: once its deployment's removal has
// begun (the mark the Delete writes on the function first), a sweep puts
// no hook of ours back: one that runs after the removal (queued, retried
// by Lambda), and one that read the mark before the removal began and puts
// after it has removed the hooks (it reads the mark again once it has put,
// and takes back what it put). Another tool's hook is never touched.
func TestSweepPutsNoHookBackOnceRemoved(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("new-nodes", "true"), taggedGroup("others", "true")}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{"others": {{LifecycleHookName: aws.String("nth-terminate")}}}}
	self := &fakeSelf{name: "node-drainer"}
	h := deployment(e, hp, "node-drainer", self)
	handle := func(what string, payload []byte) {
		t.Helper()
		ctx, cancel := context.WithTimeout(invokedAs(context.Background(), self), 5*time.Second)
		defer cancel()
		if out, err := h.Serve(ctx, payload); err != nil {
			t.Fatalf("%s: %+v, %v", what, out, err)
		}
	}
	sweep := func(what string) {
		t.Helper()
		if res, _, err := sweepOnce(h, self); err != nil || len(res.Failed) > 0 {
			t.Fatalf("%s: %+v, %v", what, res, err)
		}
	}
	sweep("the first sweep")
	if got := hp.HookNames("new-nodes"); !slices.Equal(got, []string{"node-drainer-terminate"}) {
		t.Fatalf("the first sweep put %v on new-nodes", got)
	}
	handle("the removal", terraformPayload(t, "delete", hookProps()))
	sweep("a sweep after the removal")
	if got := hp.HookNames("new-nodes"); len(got) != 0 {
		t.Errorf("after the removal and a sweep, new-nodes has %v; want no hook", got)
	}

	handle("installed again", terraformPayload(t, "create", hookProps()))
	hp.Have["new-nodes"] = nil
	// the removal runs right after the sweep has read the mark
	self.afterGet = func() { handle("the removal during the sweep", terraformPayload(t, "delete", hookProps())) }
	sweep("a sweep during the removal")
	if got := hp.HookNames("new-nodes"); len(got) != 0 {
		t.Errorf("a sweep that raced the removal left %v on new-nodes; want no hook", got)
	}
	// a function already deleted (its removal done) is as marked
	handle("installed again", terraformPayload(t, "create", hookProps())) // it puts the hooks on the tagged groups
	handle("removed again", terraformPayload(t, "delete", hookProps()))
	self.gone = true
	sweep("a sweep retried after the function was deleted")
	if got := hp.HookNames("new-nodes"); len(got) != 0 {
		t.Errorf("a sweep of a deleted function left %v on new-nodes; want no hook", got)
	}
	if got := hp.HookNames("others"); !slices.Equal(got, []string{"nth-terminate"}) {
		t.Errorf("another tool's hook: %v", got)
	}
}

// A sweep that cannot read the removal's mark puts no hook (a reading that
// fails acts on nothing) and says why; once it can, it puts them.
func TestSweepPutsNoHookWhenTheMarkCannotBeRead(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("new-nodes", "true")}
	hp := &hookstest.AutoScaling{Groups: e.asg}
	self := &fakeSelf{name: "node-drainer", err: errors.New("AccessDeniedException: lambda:ListTags")}
	h := deployment(e, hp, "node-drainer", self)
	if _, _, err := sweepOnce(h, self); len(hp.Puts) != 0 || err == nil || !strings.Contains(err.Error(), "removal mark") {
		t.Errorf("mark unreadable: puts %v, error %v; want nothing put and the failure said", hp.Puts, err)
	}
	self.err = nil
	if _, _, err := sweepOnce(h, self); err != nil {
		t.Fatal(err)
	}
	if got := hp.HookNames("new-nodes"); !slices.Equal(got, []string{"node-drainer-terminate"}) || aws.ToString(hp.Have["new-nodes"][0].NotificationMetadata) != `{"node-drainer":["node-drainer"]}` {
		t.Errorf("mark readable: new-nodes has %v (%+v); want our hook, marked ours", got, hp.Have["new-nodes"])
	}
}

// TestStackReleaseStep: the update's first step (LifecycleHooksRelease,
// before the grants change) removes the hooks of the groups leaving the
// deployment, and nothing else: no hook put, a renamed hook's old name
// kept for the main step to remove once the new one is put, a group that
// still carries the tag kept; its Create and Delete change nothing.
func TestStackReleaseStep(t *testing.T) {
	srv := newCFNServer(t)
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("blue")}, taggedGroup("green", "true"), {AutoScalingGroupName: aws.String("red")}}
	hp := &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
		"blue": {markedBy("node-drainer-terminate", "node-drainer")}, "green": {markedBy("node-drainer-terminate", "node-drainer")},
		"red": {markedBy("node-drainer-terminate", "node-drainer")},
	}}
	h := deployment(e, hp, "node-drainer", nil)
	release := func(p map[string]any) map[string]any { p["Release"] = "true"; return p }
	renamed := release(hookProps("red"))
	renamed["TerminateHookName"] = "drainer-terminate"
	for _, kind := range []cfn.RequestType{cfn.RequestCreate, cfn.RequestDelete} {
		if r := cfnCall(t, h, srv, kind, release(hookProps("blue", "green", "red")), nil); r.Status != cfn.StatusSuccess || len(hp.Calls) != 0 {
			t.Fatalf("release step's %s: %s %q, calls %v; want nothing done", kind, r.Status, r.Reason, hp.Calls)
		}
	}
	// blue leaves; green moves to the tag; red stays, its hook renamed
	if r := cfnCall(t, h, srv, cfn.RequestUpdate, renamed, release(hookProps("blue", "green", "red"))); r.Status != cfn.StatusSuccess {
		t.Fatalf("release step's update: %s %q", r.Status, r.Reason)
	}
	if !slices.Equal(hp.Calls, []string{"delete blue/node-drainer-terminate"}) {
		t.Errorf("release step's update: calls %v; want blue's hook removed alone", hp.Calls)
	}
}

// The function reads its mark at its own ARN as Lambda gives it to the
// invocation, less the alias or version it was invoked by (tags are the
// function's): a sweep invoked through an alias puts the hook as usual.
func TestRemovalMarkReadAtTheInvokedARN(t *testing.T) {
	e := newEnv()
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("new-nodes", "true")}
	hp := &hookstest.AutoScaling{Groups: e.asg}
	self := &fakeSelf{name: "node-drainer"}
	h := deployment(e, hp, "node-drainer", self)
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{InvokedFunctionArn: self.arn() + ":live"})
	res, _, err := h.EnsureTagged(ctx, sweepTag, discovery.Wanted("node-drainer-terminate", true, "", false, 300), false)
	if err != nil || !slices.Equal(hp.HookNames("new-nodes"), []string{"node-drainer-terminate"}) {
		t.Errorf("sweep through an alias: %+v, %v; new-nodes has %v, want our hook (the mark read at the unqualified ARN)", res, err, hp.HookNames("new-nodes"))
	}
}

// An uninstall removes the hooks the deployment put on a group that no
// longer carries the tag (the sweep put them while it did; the tag taken
// off, or its value changed, since): found by their mark, which names the
// deployment, on any group of the region. Another deployment's hook, one
// no deployment marked, and another tool's stay where they are, and a
// drain in flight under such a hook is waited for as any (rule 17).
func TestUninstallRemovesTheHooksOfAGroupUntaggedSince(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv()
		untagged := waitingIn(astypes.AutoScalingGroup{AutoScalingGroupName: aws.String("untagged")}, idA, astypes.LifecycleStateTerminatingWait)
		byHand := astypes.LifecycleHook{LifecycleHookName: aws.String("node-drainer-terminate"), LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING")}
		e.asg.groups = []astypes.AutoScalingGroup{taggedGroup("tagged", "true"), untagged, taggedGroup("other-value", "false"),
			{AutoScalingGroupName: aws.String("anothers")}, {AutoScalingGroupName: aws.String("by-hand")}}
		hp := &cutWatch{asg: e.asg, AutoScaling: &hookstest.AutoScaling{Groups: e.asg, Have: map[string][]astypes.LifecycleHook{
			"tagged":      {markedBy("node-drainer-terminate", "node-drainer")},
			"untagged":    {markedBy("node-drainer-terminate", "node-drainer"), {LifecycleHookName: aws.String("nth-terminate")}},
			"other-value": {markedBy("node-drainer-terminate", "node-drainer")},
			"anothers":    {markedBy("node-drainer-terminate", "node-drainer-blue")},
			"by-hand":     {byHand},
		}}}
		drainEndsAfter(t, e, "untagged", 30*time.Second)
		out, err := New(e.cfg, Clients{Hooks: hp}, nil).Serve(lambdaCtx(t, 900*time.Second), terraformPayload(t, "delete", hookProps()))
		slices.Sort(hp.Deletes)
		want := []string{"other-value/node-drainer-terminate", "tagged/node-drainer-terminate", "untagged/node-drainer-terminate"}
		if err != nil || !slices.Equal(hp.Deletes, want) {
			t.Fatalf("delete: %+v, %v, deleted %v; want %v", out, err, hp.Deletes, want)
		}
		if cut := hp.cut(); len(cut) != 0 {
			t.Errorf("the uninstall deleted %v while an instance waited under it; want the drain waited for (30 s)", cut)
		}
		if !slices.Equal(hp.HookNames("untagged"), []string{"nth-terminate"}) || len(hp.HookNames("anothers")) != 1 ||
			!reflect.DeepEqual(hp.Have["by-hand"], []astypes.LifecycleHook{byHand}) {
			t.Errorf("left %v; want nth's hook on untagged, another deployment's and the hand-made hook as they were", hp.Have)
		}
	})
}
