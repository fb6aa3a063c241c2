package node

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func marksOf(t *testing.T, c *fake.Clientset) State {
	t.Helper()
	s, _ := Marks(get(t, c, nodeName))
	return s
}

// The marks a cause sets, onto a Node as read (ApplyTo: what the function
// does), and what it records as its own.
func TestApplyMarks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		node   *corev1.Node
		mark   Mark
		made   Changes // set now, and so owned
		taints []string
	}{
		{
			name:   "clean node, drain",
			node:   newNode(nodeName, ""),
			mark:   drainMark,
			made:   Changes{Cordoned: true, Labeled: true, Draining: true},
			taints: []string{TaintDraining + "=terminate:NoSchedule"},
		},
		{
			name: "clean node, cordon only",
			node: newNode(nodeName, ""),
			mark: Mark{Cause: CauseRebalance, Cordon: true},
			made: Changes{Cordoned: true},
		},
		{
			name:   "clean node, out of service",
			node:   newNode(nodeName, ""),
			mark:   Mark{Cause: CauseOutOfService, Cordon: true, OutOfService: true},
			made:   Changes{Cordoned: true, OutOfService: true},
			taints: []string{TaintOutOfService + "=nodeshutdown:NoExecute"},
		},
		{
			name:   "someone else's cordon and label are not ours",
			node:   newNode(nodeName, "", cordoned, labelled(LabelExcludeLB, "false"), tainted("example.com/maintenance", corev1.TaintEffectNoSchedule)),
			mark:   drainMark,
			made:   Changes{Draining: true},
			taints: []string{"example.com/maintenance=someone-else:NoSchedule", TaintDraining + "=terminate:NoSchedule"},
		},
		{
			name:   "everything already set by someone else: only the cause is recorded",
			node:   newNode(nodeName, "", cordoned, labelled(LabelExcludeLB, "true"), tainted(TaintDraining, corev1.TaintEffectNoSchedule)),
			mark:   drainMark,
			taints: []string{TaintDraining + "=someone-else:NoSchedule"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.node)
			made, err := ApplyTo(context.Background(), c, get(t, c, nodeName), tc.mark, now, false)
			if err != nil {
				t.Fatal(err)
			}
			if made != tc.made {
				t.Errorf("made %+v, want %+v", made, tc.made)
			}
			n := get(t, c, nodeName)
			s, ok := Marks(n)
			h, held := s.Causes[tc.mark.Cause]
			if !ok || !held || !h.Since.Equal(now) || s.Owned != tc.made || len(s.Causes) != 1 {
				t.Errorf("recorded %+v (ok=%v): want cause %s since %s, owned %+v", s, ok, tc.mark.Cause, now, tc.made)
			}
			if tc.mark.Cordon && !n.Spec.Unschedulable {
				t.Error("not cordoned")
			}
			if tc.mark.ExcludeLB {
				if _, ok := n.Labels[LabelExcludeLB]; !ok {
					t.Error("not excluded from load balancers")
				}
			}
			if got := taintKeys(n); !reflect.DeepEqual(got, tc.taints) {
				t.Errorf("taints %v, want %v", got, tc.taints)
			}
			if n.Labels["pool"] != "general" {
				t.Errorf("other labels lost: %v", n.Labels)
			}

			// idempotent: the same mark again changes nothing and writes nothing
			before := writes(c)
			again, err := ApplyTo(context.Background(), c, get(t, c, nodeName), tc.mark, now.Add(time.Minute), false)
			if err != nil {
				t.Fatal(err)
			}
			if again.Any() {
				t.Errorf("second ApplyTo made %+v, want nothing", again)
			}
			if w := writes(c) - before; w != 0 {
				t.Errorf("second ApplyTo wrote the node %d times", w)
			}
			if n2 := get(t, c, nodeName); !reflect.DeepEqual(n2.Spec, n.Spec) || !reflect.DeepEqual(n2.Annotations, n.Annotations) {
				t.Errorf("second ApplyTo changed the node:\n%+v\n%+v", n.Spec, n2.Spec)
			}
		})
	}
}

func TestApplyToDryRun(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	made, err := ApplyTo(context.Background(), c, get(t, c, nodeName), drainMark, now, true)
	if err != nil {
		t.Fatal(err)
	}
	if !made.Cordoned || !made.Labeled || !made.Draining {
		t.Errorf("dry run should say what it would change, got %+v", made)
	}
	if w := writes(c); w != 0 {
		t.Errorf("dry run wrote the node %d times", w)
	}
	n := get(t, c, nodeName)
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 0 || n.Annotations[AnnotationOwned] != "" {
		t.Errorf("dry run changed the node: %+v %v", n.Spec, n.Annotations)
	}
}

// A rebalance cordon, then a spot warning's drain, then the terminate hook:
// each cause is held; releasing one keeps what the others still want.
func TestCausesAccumulate(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	ctx := context.Background()
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), Mark{Cause: CauseRebalance, Cordon: true, Expires: now.Add(time.Hour)}, now, false); err != nil {
		t.Fatal(err)
	}
	later := now.Add(5 * time.Minute)
	made, err := ApplyTo(ctx, c, get(t, c, nodeName), Mark{Cause: CauseSpot, Cordon: true, ExcludeLB: true, Draining: true, Expires: later.Add(time.Hour)}, later, false)
	if err != nil {
		t.Fatal(err)
	}
	if made.Cordoned || !made.Labeled || !made.Draining {
		t.Errorf("made %+v: the cordon was already there", made)
	}
	s := marksOf(t, c)
	if got := s.CauseList(); !reflect.DeepEqual(got, []Cause{CauseRebalance, CauseSpot}) || !s.Since().Equal(now) {
		t.Errorf("causes %v since %s: want rebalance and spot since the first", got, s.Since())
	}

	// the rebalance goes: the spot warning still wants the cordon
	undone, err := Release(ctx, c, nodeName, CauseRebalance, later, false)
	if err != nil {
		t.Fatal(err)
	}
	if undone.Any() {
		t.Errorf("undid %+v while the spot warning holds the node", undone)
	}
	if n := get(t, c, nodeName); !n.Spec.Unschedulable || !HasTaint(n, TaintDraining) {
		t.Error("the spot warning's marks were removed with the rebalance")
	}
	// the spot warning goes: everything ours goes, the record too
	undone, err = Release(ctx, c, nodeName, CauseSpot, later, false)
	if err != nil {
		t.Fatal(err)
	}
	if undone != (Changes{Cordoned: true, Labeled: true, Draining: true}) {
		t.Errorf("undone %+v", undone)
	}
	n := get(t, c, nodeName)
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 0 || n.Labels[LabelExcludeLB] != "" || n.Annotations[AnnotationOwned] != "" {
		t.Errorf("not released: %+v %v %v", n.Spec, n.Labels, n.Annotations)
	}
}

// An out-of-service cause released by a `running` event leaves the cordon a
// terminate drain still holds.
func TestReleaseKeepsOtherCausesMarks(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	ctx := context.Background()
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), drainMark, now, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), Mark{Cause: CauseOutOfService, Cordon: true, OutOfService: true}, now, false); err != nil {
		t.Fatal(err)
	}
	undone, err := Release(ctx, c, nodeName, CauseOutOfService, now, false)
	if err != nil {
		t.Fatal(err)
	}
	if undone != (Changes{OutOfService: true}) {
		t.Errorf("undone %+v, want only the out-of-service taint", undone)
	}
	n := get(t, c, nodeName)
	if !n.Spec.Unschedulable || HasTaint(n, TaintOutOfService) || !HasTaint(n, TaintDraining) || !Holds(n, CauseTerminate) || Holds(n, CauseOutOfService) {
		t.Errorf("node %+v %v", n.Spec, n.Annotations)
	}
}

// A mark with Renew restarts a hold of its cause older than Renew (an
// earlier action's), and keeps a newer one's Since; ReleaseHolds lifts only
// the hold begun when its caller read it.
func TestRenewAndReleaseHolds(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	ctx := context.Background()
	old, begun := now.Add(-24*time.Hour), now.Add(-time.Minute)
	since := func() time.Time { s, _ := Marks(get(t, c, nodeName)); return s.Causes[CauseTerminate].Since }
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), drainMark, old, false); err != nil {
		t.Fatal(err)
	}
	renewing := drainMark
	renewing.Renew = begun
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), renewing, now, false); err != nil || !since().Equal(now) {
		t.Fatalf("a hold from %s renewed by a drain begun %s: since %s (%v), want %s", old, begun, since(), err, now)
	}
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), renewing, now.Add(time.Minute), false); err != nil || !since().Equal(now) {
		t.Fatalf("this drain's own hold: since %s (%v), want it kept at %s", since(), err, now)
	}
	// the evidence was read with the old hold: the renewed one stays
	if undone, err := ReleaseHolds(ctx, c, nodeName, map[Cause]time.Time{CauseTerminate: old}, now, false); err != nil || undone.Any() || !Holds(get(t, c, nodeName), CauseTerminate) {
		t.Fatalf("ReleaseHolds of the old hold lifted the renewed one: %+v, %v", undone, err)
	}
	undone, err := ReleaseHolds(ctx, c, nodeName, map[Cause]time.Time{CauseTerminate: now}, now, false)
	if n := get(t, c, nodeName); err != nil || undone != (Changes{Cordoned: true, Labeled: true, Draining: true}) || Holds(n, CauseTerminate) || n.Spec.Unschedulable {
		t.Errorf("ReleaseHolds of the hold read: undone %+v, %v; node %+v", undone, err, n.Spec)
	}
}

// EndHold records that a hold's action is over and keeps the hold and its
// marks; the next mark of the cause begins it anew, whatever its Renew, and
// nothing is over any more.
func TestEndHold(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	ctx := context.Background()
	old := now.Add(-time.Hour)
	hold := func() Hold { s, _ := Marks(get(t, c, nodeName)); return s.Causes[CauseTerminate] }
	if err := EndHold(ctx, c, nodeName, CauseTerminate, now, false); err != nil || Holds(get(t, c, nodeName), CauseTerminate) {
		t.Fatalf("no hold: %v, or one made", err)
	}
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), drainMark, old, false); err != nil {
		t.Fatal(err)
	}
	if err := EndHold(ctx, c, nodeName, CauseTerminate, now.Add(-time.Minute), true); err != nil || hold().Over != nil {
		t.Fatalf("a dry run recorded the end: %+v, %v", hold(), err)
	}
	if err := EndHold(ctx, c, nodeName, CauseTerminate, now.Add(-time.Minute), false); err != nil {
		t.Fatal(err)
	}
	if h, n := hold(), get(t, c, nodeName); h.Over == nil || !h.Over.Equal(now.Add(-time.Minute)) || !h.Since.Equal(old) || !n.Spec.Unschedulable {
		t.Fatalf("hold %+v, cordoned %v: want it over, kept, its marks in place", h, n.Spec.Unschedulable)
	}
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), drainMark, now, false); err != nil {
		t.Fatal(err)
	}
	if h := hold(); h.Over != nil || !h.Since.Equal(now) {
		t.Errorf("a new action's mark on a hold over: %+v, want it begun anew at %s", h, now)
	}
}

// Expired advisory causes go with the next release of any cause.
func TestReleaseDropsExpiredCauses(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	ctx := context.Background()
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), Mark{Cause: CauseRebalance, Cordon: true, Expires: now.Add(time.Hour)}, now, false); err != nil {
		t.Fatal(err)
	}
	// not yet expired: releasing another cause keeps it
	if undone, err := Release(ctx, c, nodeName, CauseSpot, now.Add(59*time.Minute), false); err != nil || undone.Any() {
		t.Fatalf("undone %+v, %v before the expiry", undone, err)
	}
	if !get(t, c, nodeName).Spec.Unschedulable {
		t.Fatal("cordon lifted before its expiry")
	}
	undone, err := Release(ctx, c, nodeName, CauseSpot, now.Add(time.Hour), false)
	if err != nil {
		t.Fatal(err)
	}
	if undone != (Changes{Cordoned: true}) || get(t, c, nodeName).Spec.Unschedulable {
		t.Errorf("expired rebalance cordon not lifted: %+v", undone)
	}
}

// A Node read, then deleted before the write: an error, and no Node made.
func TestApplyToNodeGone(t *testing.T) {
	read := newNode(nodeName, "")
	read.UID, read.ResourceVersion = "uid-1", "1"
	c := fake.NewClientset()
	if _, err := ApplyTo(context.Background(), c, read, drainMark, now, false); err == nil {
		t.Fatal("want an error for a missing node")
	}
	if l, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("nodes after marking a deleted one: %v (%v)", l, err)
	}
}

func TestApplyToRetriesConflicts(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	conflicts := 2
	c.PrependReactor("update", "nodes", func(_ k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, errConflict()
		}
		return false, nil, nil
	})
	if _, err := ApplyTo(context.Background(), c, get(t, c, nodeName), drainMark, now, false); err != nil {
		t.Fatal(err)
	}
	if !get(t, c, nodeName).Spec.Unschedulable {
		t.Error("not cordoned after conflicts")
	}
}

// versioned makes the fake clientset honour a Node update's resourceVersion,
// as the apiserver does: another than the Node's is a 409 Conflict; a write
// that passes bumps it.
func versioned(c *fake.Clientset) {
	c.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := a.(k8stesting.UpdateAction).GetObject().(*corev1.Node).DeepCopy()
		cur, err := c.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", n.Name)
		if err != nil {
			return true, nil, err
		}
		if rv := cur.(*corev1.Node).ResourceVersion; n.ResourceVersion != rv {
			return true, nil, errConflict()
		}
		n.ResourceVersion += "+"
		return true, n, c.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, "")
	})
}

// ApplyTo writes onto the Node as the caller read it, without reading it
// first; one changed since is read again (a conflict), and one registered
// again under the name (another UID) is not marked.
func TestApplyTo(t *testing.T) {
	read := newNode(nodeName, "")
	read.UID, read.ResourceVersion = "uid-1", "1"
	mark := Mark{Cause: CauseOutOfService, Cordon: true, OutOfService: true}
	for _, tc := range []struct {
		name     string
		now      func() *corev1.Node // the Node as it is when ApplyTo runs
		unpinned bool                // the caller's copy has no resourceVersion
		gets     int
		wantErr  error
		cordoned bool
	}{
		{name: "as read: written at once", now: func() *corev1.Node { return read.DeepCopy() }, cordoned: true},
		{name: "changed since: read again", gets: 1, cordoned: true, now: func() *corev1.Node {
			n := read.DeepCopy()
			n.ResourceVersion = "2"
			n.Labels = map[string]string{"changed": "by another writer"}
			return n
		}},
		{name: "registered again: not marked", gets: 1, wantErr: ErrReplaced, now: func() *corev1.Node {
			n := read.DeepCopy()
			n.UID, n.ResourceVersion = "uid-2", "7"
			return n
		}},
		{name: "no resourceVersion: read first", unpinned: true, gets: 1, cordoned: true, now: func() *corev1.Node { return read.DeepCopy() }},
		{name: "no resourceVersion, registered again: not marked", unpinned: true, gets: 1, wantErr: ErrReplaced, now: func() *corev1.Node {
			n := read.DeepCopy()
			n.UID = "uid-2"
			return n
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.now())
			versioned(c)
			n := read.DeepCopy()
			if tc.unpinned {
				n.ResourceVersion = ""
			}
			_, err := ApplyTo(context.Background(), c, n, mark, now, false)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ApplyTo: %v, want %v", err, tc.wantErr)
			}
			gets := 0
			for _, a := range c.Actions() {
				if a.GetVerb() == "get" {
					gets++
				}
			}
			if gets != tc.gets {
				t.Errorf("%d reads of the node, want %d", gets, tc.gets)
			}
			n = get(t, c, nodeName)
			if n.Spec.Unschedulable != tc.cordoned || HasTaint(n, TaintOutOfService) != tc.cordoned {
				t.Errorf("cordoned %v, tainted %v: want %v", n.Spec.Unschedulable, HasTaint(n, TaintOutOfService), tc.cordoned)
			}
			if _, changed := tc.now().Labels["changed"]; changed && n.Labels["changed"] == "" {
				t.Errorf("labels %v: the other writer's change was overwritten", n.Labels)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	for _, tc := range []struct {
		name         string
		node         *corev1.Node
		mark         *Mark // applied first, unless nil
		thenByOthers nodeOpt
		wantCordon   bool
		wantLabel    bool
		wantTaints   []string
	}{
		{
			name: "undoes what we did",
			node: newNode(nodeName, ""),
			mark: &Mark{Cause: CauseOutOfService, Cordon: true, ExcludeLB: true, Draining: true, OutOfService: true},
		},
		{
			name:       "someone else's cordon stays",
			node:       newNode(nodeName, "", cordoned),
			mark:       &Mark{Cause: CauseOutOfService, Cordon: true, OutOfService: true},
			wantCordon: true,
		},
		{
			name:       "someone else's taints stay, ours go",
			node:       newNode(nodeName, "", tainted("example.com/maintenance", corev1.TaintEffectNoSchedule)),
			mark:       &Mark{Cause: CauseOutOfService, Cordon: true, OutOfService: true},
			wantTaints: []string{"example.com/maintenance=someone-else:NoSchedule"},
		},
		{
			name:       "someone else's out-of-service taint stays",
			node:       newNode(nodeName, "", tainted(TaintOutOfService, corev1.TaintEffectNoExecute)),
			mark:       &Mark{Cause: CauseOutOfService, Cordon: true, OutOfService: true},
			wantTaints: []string{TaintOutOfService + "=someone-else:NoExecute"},
		},
		{
			name: "taint added by someone else after us stays",
			node: newNode(nodeName, ""),
			mark: &Mark{Cause: CauseOutOfService, Cordon: true, Draining: true},
			thenByOthers: func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/later", Effect: corev1.TaintEffectNoExecute})
			},
			wantTaints: []string{"example.com/later=:NoExecute"},
		},
		{
			name:      "someone else's label stays",
			node:      newNode(nodeName, "", labelled(LabelExcludeLB, "true")),
			mark:      &Mark{Cause: CauseOutOfService, Cordon: true, ExcludeLB: true, Draining: true},
			wantLabel: true,
		},
		{
			name:       "nothing of ours: untouched",
			node:       newNode(nodeName, "", cordoned, tainted(TaintDraining, corev1.TaintEffectNoSchedule)),
			wantCordon: true,
			wantTaints: []string{TaintDraining + "=someone-else:NoSchedule"},
		},
		{
			name:       "unreadable record: untouched",
			node:       newNode(nodeName, "", cordoned, annotated(AnnotationOwned, "{not json")),
			wantCordon: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.node)
			ctx := context.Background()
			if tc.mark != nil {
				if _, err := ApplyTo(ctx, c, get(t, c, nodeName), *tc.mark, now, false); err != nil {
					t.Fatal(err)
				}
			}
			if tc.thenByOthers != nil {
				n := get(t, c, nodeName)
				tc.thenByOthers(n)
				if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			before := writes(c)
			undone, err := Release(ctx, c, nodeName, CauseOutOfService, now, false)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mark == nil {
				if undone.Any() || writes(c) != before {
					t.Errorf("nothing of ours, yet undone %+v with %d writes", undone, writes(c)-before)
				}
			}
			n := get(t, c, nodeName)
			if n.Spec.Unschedulable != tc.wantCordon {
				t.Errorf("unschedulable %v, want %v", n.Spec.Unschedulable, tc.wantCordon)
			}
			if _, ok := n.Labels[LabelExcludeLB]; ok != tc.wantLabel {
				t.Errorf("exclude-LB label present %v, want %v", ok, tc.wantLabel)
			}
			if got := taintKeys(n); !reflect.DeepEqual(got, tc.wantTaints) {
				t.Errorf("taints %v, want %v", got, tc.wantTaints)
			}
			if tc.mark != nil {
				if _, ok := n.Annotations[AnnotationOwned]; ok {
					t.Error("record of our changes left on the node")
				}
			}
			if n.Labels["pool"] != "general" {
				t.Errorf("other labels lost: %v", n.Labels)
			}

			// idempotent: again is a no-op
			before = writes(c)
			again, err := Release(ctx, c, nodeName, CauseOutOfService, now, false)
			if err != nil {
				t.Fatal(err)
			}
			if again.Any() || writes(c) != before {
				t.Errorf("second Release undid %+v with %d writes", again, writes(c)-before)
			}
			if n2 := get(t, c, nodeName); !reflect.DeepEqual(n2.Spec, n.Spec) || !reflect.DeepEqual(n2.Labels, n.Labels) {
				t.Errorf("second Release changed the node")
			}
		})
	}
}

func TestReleaseDryRun(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	ctx := context.Background()
	if _, err := ApplyTo(ctx, c, get(t, c, nodeName), drainMark, now, false); err != nil {
		t.Fatal(err)
	}
	before := writes(c)
	undone, err := Release(ctx, c, nodeName, CauseTerminate, now, true)
	if err != nil {
		t.Fatal(err)
	}
	if !undone.Cordoned || !undone.Draining {
		t.Errorf("dry run should say what it would undo, got %+v", undone)
	}
	if writes(c) != before {
		t.Error("dry-run Release wrote the node")
	}
	if n := get(t, c, nodeName); !n.Spec.Unschedulable || !HasTaint(n, TaintDraining) {
		t.Error("dry-run Release changed the node")
	}
}

func TestMarks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ann   map[string]string
		ok    bool
		cause Cause
	}{
		{"none", nil, false, ""},
		{"other annotations", map[string]string{"a": "b"}, false, ""},
		{"bad JSON", map[string]string{AnnotationOwned: "cordoned"}, false, ""},
		{"causes", map[string]string{AnnotationOwned: `{"owned":{"cordoned":true},"causes":{"rebalance":{"since":"2026-11-18T14:02:38Z","wants":{"cordoned":true}}}}`}, true, CauseRebalance},
		// written by the first release: one reason
		{"legacy cordon", map[string]string{AnnotationOwned: `{"reason":"cordon","since":"2026-11-18T14:02:38Z","cordoned":true}`}, true, CauseRebalance},
		{"legacy out-of-service", map[string]string{AnnotationOwned: `{"reason":"out-of-service","since":"2026-11-18T14:02:38Z","cordoned":true}`}, true, CauseOutOfService},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(nodeName, "")
			n.Annotations = tc.ann
			s, ok := Marks(n)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v (%+v)", ok, tc.ok, s)
			}
			if ok && (!s.Owned.Cordoned || !s.Causes[tc.cause].Wants.Cordoned || !s.Since().Equal(now)) {
				t.Errorf("decoded %+v", s)
			}
		})
	}
}

// A mark's Guard is asked before each attempt to write it, a retry's
// included: an objection on the retry leaves the node unmarked.
func TestApplyToAsksTheGuardBeforeEachWrite(t *testing.T) {
	read := newNode(nodeName, "")
	read.UID, read.ResourceVersion = "uid-1", "1"
	changed := read.DeepCopy()
	changed.ResourceVersion = "2" // another writer came between: a conflict, then a retry
	c := fake.NewClientset(changed)
	versioned(c)
	asked := 0
	notSafe := errors.New("not safe: EC2 says pending")
	mark := Mark{Cause: CauseOutOfService, Cordon: true, OutOfService: true, Guard: func(context.Context) error {
		if asked++; asked == 2 {
			return notSafe
		}
		return nil
	}}
	if _, err := ApplyTo(context.Background(), c, read, mark, now, false); !errors.Is(err, notSafe) || asked != 2 {
		t.Fatalf("ApplyTo: %v after %d askings; want the objection of the second", err, asked)
	}
	if n := get(t, c, nodeName); n.Spec.Unschedulable || HasTaint(n, TaintOutOfService) {
		t.Errorf("cordoned %v, tainted %v: want neither", n.Spec.Unschedulable, HasTaint(n, TaintOutOfService))
	}
}
