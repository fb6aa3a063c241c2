package discovery

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// hookWith is a terminate hook of our name as found on a group: its
// heartbeat and its NotificationMetadata as given ("": none).
func hookWith(meta string, heartbeat int32) astypes.LifecycleHook {
	h := astypes.LifecycleHook{LifecycleHookName: aws.String(terminate.Name), LifecycleTransition: aws.String(Terminating),
		HeartbeatTimeout: aws.Int32(heartbeat), DefaultResult: aws.String("CONTINUE")}
	if meta != "" {
		h.NotificationMetadata = aws.String(meta)
	}
	return h
}

// ownedBy is our terminate hook as the deployment of function fn puts it.
func ownedBy(fn string) Hook {
	h := terminate
	h.Owner = fn
	return h
}

// TestAnotherDeploymentsHookIsLeft (C5, S9): a hook of our name marked by
// another deployment is not ours. A sweep leaves it byte for byte, sweep
// after sweep: it does not add its own name to the mark (the shared list
// whose read-modify-write races left dead owners) nor correct the settings
// to its own heartbeat (two deployments rewriting it at every sweep); a
// stack listing its group is refused, naming the owner; a removal leaves
// it.
func TestAnotherDeploymentsHookIsLeft(t *testing.T) {
	ctx := context.Background()
	theirs := hookWith(`{"node-drainer":["drainer-b"]}`, 60)
	f := &fakeAPI{groups: groups(), hooks: map[string][]astypes.LifecycleHook{"a": {theirs}, "b": {theirs}}}
	for range 2 {
		res, err := Ensure(ctx, f, tag, []Hook{ownedBy("drainer-a")}, false)
		if err != nil || len(res.Failed) != 0 || len(res.NotOurs) != 2 || !strings.Contains(res.NotOurs[0], "on group a belongs to deployment drainer-b") {
			t.Fatalf("sweep: %+v, %v; want a's and b's hooks said drainer-b's, no failure", res, err)
		}
	}
	if got := f.putNames(); !slices.Equal(got, []string{"c/node-drainer-terminate"}) {
		t.Errorf("two sweeps put %v; want c's hook alone (a's and b's are drainer-b's)", got)
	}
	for _, g := range []string{"a", "b"} {
		if !reflect.DeepEqual(f.hooks[g], []astypes.LifecycleHook{theirs}) {
			t.Errorf("%s's hook, drainer-b's, became %+v", g, f.hooks[g])
		}
	}
	f.puts = nil
	res, err := EnsureNamed(ctx, f, []string{"plain", "a"}, []Hook{ownedBy("drainer-a"), launch}, everywhere, false)
	want := "hook node-drainer-terminate on group a belongs to deployment drainer-b: two deployments cannot share a hook; " +
		"give one of them other hook names (TerminateHookName/LaunchHookName) or remove the other first"
	if err == nil || err.Error() != want || len(res.Put) != 0 || len(f.puts) != 0 {
		t.Errorf("a stack listing plain and a: %+v, %v, puts %v; want it refused, nothing put: %q", res, err, f.putNames(), want)
	}
	removed, failed := Remove(ctx, f, []string{"a", "b"}, []string{terminate.Name}, "drainer-a", false)
	if len(removed) != 0 || len(failed) != 0 || len(f.deletes) != 0 || !reflect.DeepEqual(f.hooks["a"], []astypes.LifecycleHook{theirs}) {
		t.Errorf("drainer-a's removal: removed %v, failed %v, deleted %v, a has %+v; want drainer-b's hook left", removed, failed, f.deletes, f.hooks["a"])
	}
}

// everywhere refuses, on every listed group, a hook not ours (a create).
func everywhere(string) bool { return true }

// TestAGroupAlreadyListedIsNotRefused: a listed group the deployment had
// already (an update, and its rollback) is not refused over a hook not
// ours found there now: the hook is left and said, and the other listed
// groups get theirs; a group newly listed with one is refused.
func TestAGroupAlreadyListedIsNotRefused(t *testing.T) {
	ctx := context.Background()
	byHand := hookWith("", 60)
	f := &fakeAPI{groups: groups(), hooks: map[string][]astypes.LifecycleHook{"a": {byHand}}}
	had := func(g string) bool { return g != "a" }
	res, err := EnsureNamed(ctx, f, []string{"a", "b"}, []Hook{ownedBy("drainer-a")}, had, false)
	if err != nil || !slices.Equal(res.Put, []string{"b/node-drainer-terminate"}) || len(res.Failed) != 0 || len(res.NotOurs) != 1 ||
		!strings.Contains(res.NotOurs[0], "hook node-drainer-terminate on group a carries no node-drainer deployment's mark") {
		t.Errorf("EnsureNamed = %+v, %v; want a's hook said, b's put", res, err)
	}
	if !reflect.DeepEqual(f.hooks["a"], []astypes.LifecycleHook{byHand}) {
		t.Errorf("a's hook became %+v", f.hooks["a"])
	}
	if _, err := EnsureNamed(ctx, f, []string{"a", "b"}, []Hook{ownedBy("drainer-a")}, func(g string) bool { return g == "a" }, false); err == nil {
		t.Error("a newly listed: want it refused")
	}
}

// TestAHookWeDidNotPutIsNeverOurs (S3, rule 18): a hook of our name whose
// NotificationMetadata carries no mark of ours (made by hand, by another
// tool, JSON or not, or with our key in another case, which encoding/json
// would match) is not claimed by a sweep nor by a stack update that had its
// group: never rewritten, never deleted by a removal.
func TestAHookWeDidNotPutIsNeverOurs(t *testing.T) {
	ctx := context.Background()
	found := map[string]astypes.LifecycleHook{
		"a": hookWith("", 60),                               // by hand, no metadata
		"b": hookWith(`{"team":"x","ticket":42}`, 300),      // another tool's JSON
		"c": hookWith("drain me gently", 300),               // not JSON
		"d": hookWith(`{"Node-Drainer":["drainer-a"]}`, 60), // our key in another case
	}
	f := &fakeAPI{groups: append(groups(), group("d", "node-drainer.io/enabled=true")), hooks: map[string][]astypes.LifecycleHook{}}
	for g, h := range found {
		f.hooks[g] = []astypes.LifecycleHook{h}
	}
	mine := ownedBy("drainer-a")
	const why = "carries no node-drainer deployment's mark"
	if res, err := Ensure(ctx, f, tag, []Hook{mine}, false); err != nil || len(res.NotOurs) != 4 || !strings.Contains(res.NotOurs[0], why) || len(res.Failed) != 0 {
		t.Errorf("sweep: %+v, %v; want the four hooks said not ours", res, err)
	}
	if _, err := EnsureNamed(ctx, f, []string{"a", "b", "c", "d"}, []Hook{mine}, everywhere, false); err == nil || strings.Count(err.Error(), why) != 4 {
		t.Errorf("a stack listing them: %v; want each group's hook refused", err)
	}
	removed, _ := Remove(ctx, f, []string{"a", "b", "c", "d"}, []string{terminate.Name}, "drainer-a", false)
	if len(f.puts) != 0 || len(f.deletes) != 0 || len(removed) != 0 {
		t.Errorf("put %v, deleted %v (removed %v); want hooks we did not put left alone", f.putNames(), f.deletes, removed)
	}
	for g, h := range found {
		if !reflect.DeepEqual(f.hooks[g], []astypes.LifecycleHook{h}) {
			t.Errorf("%s's hook became %+v; want it byte for byte", g, f.hooks[g])
		}
	}
}

// TestOurHookCorrectedKeepsItsMetadata: a hook marked ours alone is ours:
// its settings are corrected when they drift, and its NotificationMetadata
// is put back byte for byte (another key someone added kept, our mark as
// it was).
func TestOurHookCorrectedKeepsItsMetadata(t *testing.T) {
	meta := `{ "team": "x", "node-drainer": [ "drainer-a" ], "n": 1.50 }`
	f := &fakeAPI{groups: groups(), hooks: map[string][]astypes.LifecycleHook{"a": {hookWith(meta, 60)}}}
	res, err := EnsureNamed(context.Background(), f, []string{"a"}, []Hook{ownedBy("drainer-a")}, everywhere, false)
	if err != nil || !slices.Equal(res.Put, []string{"a/node-drainer-terminate"}) || len(res.Failed) != 0 {
		t.Fatalf("EnsureNamed = %+v, %v; want a's hook corrected", res, err)
	}
	if got := f.hooks["a"][0]; aws.ToInt32(got.HeartbeatTimeout) != 300 || aws.ToString(got.NotificationMetadata) != meta {
		t.Errorf("corrected to %d s, metadata %q; want 300 s and %q", aws.ToInt32(got.HeartbeatTimeout), aws.ToString(got.NotificationMetadata), meta)
	}
}

// TestLegacySharedMark: a mark from before one owner per hook that names
// this deployment among others (two deployments put it) is left by the
// sweep, settings and all (no flapping between their heartbeats); each
// uninstall takes its own name out, other keys kept byte for byte, and the
// last one's deletes the hook.
func TestLegacySharedMark(t *testing.T) {
	ctx := context.Background()
	shared := hookWith(`{"node-drainer":["drainer-a","drainer-b"],"team":"x"}`, 60)
	f := &fakeAPI{groups: groups(), hooks: map[string][]astypes.LifecycleHook{"a": {shared}}}
	res, err := EnsureNamed(ctx, f, []string{"a"}, []Hook{ownedBy("drainer-a")}, everywhere, false)
	if err != nil || len(res.Failed) != 0 || len(res.NotOurs) != 1 || !strings.Contains(res.NotOurs[0], "shared with drainer-b") {
		t.Errorf("a stack listing a: %+v, %v; want the shared hook said, no failure", res, err)
	}
	if len(f.puts) != 0 || !reflect.DeepEqual(f.hooks["a"], []astypes.LifecycleHook{shared}) {
		t.Fatalf("a shared hook rewritten: puts %v, a has %+v", f.putNames(), f.hooks["a"])
	}
	removed, failed := Remove(ctx, f, []string{"a"}, []string{terminate.Name}, "drainer-a", false)
	if !slices.Equal(removed, []string{"a/node-drainer-terminate kept for drainer-b"}) || len(failed) != 0 {
		t.Errorf("drainer-a's removal: %v, %v", removed, failed)
	}
	if got := aws.ToString(f.hooks["a"][0].NotificationMetadata); got != `{"node-drainer":["drainer-b"],"team":"x"}` {
		t.Errorf("kept for drainer-b with metadata %s", got)
	}
	removed, _ = Remove(ctx, f, []string{"a"}, []string{terminate.Name}, "drainer-b", false)
	if !slices.Equal(removed, []string{"a/node-drainer-terminate"}) || len(f.hooks["a"]) != 0 {
		t.Errorf("drainer-b's removal: %v, a has %v", removed, f.hooks["a"])
	}
}

// TestMetadataOverTheLimitIsRefused (S2): a put whose NotificationMetadata
// would pass Auto Scaling's 1,023 characters is not made; the group's
// failure says why.
func TestMetadataOverTheLimitIsRefused(t *testing.T) {
	f := &fakeAPI{groups: groups()}
	res, err := EnsureNamed(context.Background(), f, []string{"a"}, []Hook{ownedBy(strings.Repeat("x", 1010))}, everywhere, false)
	if err != nil || len(f.puts) != 0 || len(res.Failed) != 1 || !strings.Contains(res.Failed[0], "1,023") {
		t.Errorf("EnsureNamed = %+v, %v, puts %v; want no put and the limit said", res, err, f.putNames())
	}
}

// TestTwoRemovalsAtOnce (C5): two deployments sharing a hook under a mark
// from before one owner per hook are removed at the same moment; each
// read the mark naming both, and the other's write lands just after this
// one's, putting this one's name back. This removal reads the hook again
// after its write, finds its name alone, and deletes the hook: no dead
// owner is left holding every scale-in for its timeout.
func TestTwoRemovalsAtOnce(t *testing.T) {
	ctx := context.Background()
	f := &fakeAPI{groups: groups(), hooks: map[string][]astypes.LifecycleHook{"a": {hookWith(`{"node-drainer":["drainer-a","drainer-b"]}`, 300)}}}
	f.afterPut = func(in *autoscaling.PutLifecycleHookInput) {
		f.afterPut = nil
		back := *in
		back.NotificationMetadata = aws.String(`{"node-drainer":["drainer-a"]}`) // drainer-b's removal, read before drainer-a's write
		if _, err := f.PutLifecycleHook(ctx, &back); err != nil {
			t.Error(err)
		}
	}
	removed, failed := Remove(ctx, f, []string{"a"}, []string{terminate.Name}, "drainer-a", false)
	if len(f.hooks["a"]) != 0 || !slices.Equal(removed, []string{"a/node-drainer-terminate"}) || len(failed) != 0 {
		t.Errorf("removed %v, failed %v, a has %+v; want the hook gone (its last owner removed)", removed, failed, f.hooks["a"])
	}
}

// TestRenamedFunctionTakesItsMark: a deployment whose function was renamed
// (Replaces, a stack update) takes over the hooks its former name marked,
// the rest of the metadata as it was; in a shared mark from before, only
// the name changes, the settings are left.
func TestRenamedFunctionTakesItsMark(t *testing.T) {
	f := &fakeAPI{groups: groups(), hooks: map[string][]astypes.LifecycleHook{
		"a": {hookWith(`{"team":"x","node-drainer":["old-fn"]}`, 300)},
		"b": {hookWith(`{"node-drainer":["old-fn","drainer-b"]}`, 60)},
	}}
	h := ownedBy("new-fn")
	h.Replaces = "old-fn"
	res, err := EnsureNamed(context.Background(), f, []string{"a", "b"}, []Hook{h}, everywhere, false)
	if err != nil || len(res.Failed) != 0 {
		t.Fatalf("EnsureNamed = %+v, %v", res, err)
	}
	if got := aws.ToString(f.hooks["a"][0].NotificationMetadata); got != `{"team":"x","node-drainer":["new-fn"]}` {
		t.Errorf("a's mark %s; want new-fn's, team kept", got)
	}
	if got := f.hooks["b"][0]; aws.ToString(got.NotificationMetadata) != `{"node-drainer":["drainer-b","new-fn"]}` || aws.ToInt32(got.HeartbeatTimeout) != 60 {
		t.Errorf("b's hook %s, %d s; want the name changed, the settings left", aws.ToString(got.NotificationMetadata), aws.ToInt32(got.HeartbeatTimeout))
	}
}

// TestReadMark: the mark is one JSON object's key "node-drainer", exact
// case, once, a list of names; anything else is no mark of a deployment.
func TestReadMark(t *testing.T) {
	for meta, owners := range map[string][]string{
		`{"node-drainer":["a"]}`: {"a"},
		` { "x" : {"node-drainer":["b"]}, "node-drainer" : ["a","c"] } `: {"a", "c"},
		`{"node-drainer":["a"],"node-drainer":["b"]}`:                    nil,
		`{"node-drainer":["a"]} trailing`:                                nil,
		`{"node-drainer":"a"}`:                                           nil,
		`{"node-drainer":null}`:                                          nil,
		`{"NODE-DRAINER":["a"]}`:                                         nil,
		`["node-drainer"]`:                                               nil,
		`node-drainer`:                                                   nil,
		``:                                                               nil,
	} {
		m := readMark(hookWith(meta, 300))
		if m.marked != (owners != nil) || !slices.Equal(m.owners, owners) {
			t.Errorf("%q: marked %v, owners %v; want %v", meta, m.marked, m.owners, owners)
		}
		if m.marked && m.with([]string{"z"}) != strings.Replace(meta, meta[m.at:m.end], `["z"]`, 1) {
			t.Errorf("%q: with z is %q", meta, m.with([]string{"z"}))
		}
	}
	if got := Mark("node-drainer-prod"); got != `{"node-drainer":["node-drainer-prod"]}` {
		t.Errorf("Mark = %s; want terraform's jsonencode of the same (main.tf)", got)
	}
}

// A put that shortens a hook's HeartbeatTimeout heartbeats the actions
// waiting under it first: Auto Scaling applies the new timeout to them from
// their last heartbeat, and a drain last heartbeated longer ago would end at
// the put (rule 3; the simulation's I3, seeds 2826 and 3376). A put that
// lengthens it heartbeats none.
func TestShorterHeartbeatBeatsTheWaitingFirst(t *testing.T) {
	waitingIn := func(g astypes.AutoScalingGroup) astypes.AutoScalingGroup {
		g.Instances = []astypes.Instance{
			{InstanceId: aws.String("i-1"), LifecycleState: astypes.LifecycleStateTerminatingWait},
			{InstanceId: aws.String("i-2"), LifecycleState: astypes.LifecycleStateInService},
		}
		return g
	}
	for _, tc := range []struct {
		was  int32
		want []string
	}{
		{600, []string{"heartbeat a/node-drainer-terminate/i-1", "put a/node-drainer-terminate"}},
		{60, []string{"put a/node-drainer-terminate"}},
	} {
		gs := groups()
		gs[0] = waitingIn(gs[0])
		f := &fakeAPI{groups: gs, hooks: map[string][]astypes.LifecycleHook{"a": {hookWith(`{"node-drainer":["drainer-a"]}`, tc.was)}}}
		if _, err := EnsureNamed(context.Background(), f, []string{"a"}, []Hook{ownedBy("drainer-a")}, everywhere, false); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(f.calls, tc.want) {
			t.Errorf("from %d s to 300 s: calls %v, want %v", tc.was, f.calls, tc.want)
		}
	}
}
