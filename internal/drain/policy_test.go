package drain

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
)

func annotated(key, value string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[key] = value
	}
}

func grace(s int64) podOpt {
	return func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = &s }
}

func TestProtected(t *testing.T) {
	for _, tc := range []struct {
		opts []podOpt
		want string
	}{
		{nil, ""},
		{[]podOpt{annotated(AnnotationDoNotDisrupt, "true")}, "karpenter.sh/do-not-disrupt=true"},
		{[]podOpt{annotated(AnnotationDoNotDisrupt, "false")}, ""},
		{[]podOpt{annotated(AnnotationSafeToEvict, "false")}, "cluster-autoscaler.kubernetes.io/safe-to-evict=false"},
		{[]podOpt{annotated(AnnotationSafeToEvict, "true")}, ""},
		{[]podOpt{annotated("example.com/do-not-disrupt", "true")}, ""},
	} {
		if got := Protected(*pod("apps", "p", tc.opts...)); got != tc.want {
			t.Errorf("Protected(%v) = %q, want %q", pod("apps", "p", tc.opts...).Annotations, got, tc.want)
		}
	}
}

// evictedAt makes the fake act on evictions as evictions does (a pod named
// in blocked refused with 429), and records when each was sent and the
// grace period it asked for. Nothing waits in the reactor.
type evictedAt struct {
	mu    sync.Mutex
	at    map[string]time.Duration // since start
	grace map[string]int64
}

func timedEvictions(c *fake.Clientset, start time.Time, blocked ...string) (*evictedAt, *clustertest.PodWatches) {
	pods := clustertest.WatchPods(c)
	e := &evictedAt{at: map[string]time.Duration{}, grace: map[string]int64{}}
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		e.mu.Lock()
		e.at[ev.Name] = time.Since(start)
		if g := ev.DeleteOptions.GracePeriodSeconds; g != nil {
			e.grace[ev.Name] = *g
		}
		e.mu.Unlock()
		if slices.Contains(blocked, ev.Name) {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, pods.Delete(ev.Namespace, ev.Name)
	})
	return e, pods
}

func (e *evictedAt) when(name string) (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	at, ok := e.at[name]
	return at, ok
}

// A voluntary drain (PolicyKeep) evicts the other pods and never sends an
// eviction for a pod that asks not to be disrupted (either annotation):
// they remain, blocked by the pod policy, and the drain is not done.
func TestPolicyKeep(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		c := fake.NewClientset(pod("apps", "web-1", managed),
			pod("apps", "batch-0", managed, annotated(AnnotationDoNotDisrupt, "true")),
			pod("apps", "ca-0", managed, annotated(AnnotationSafeToEvict, "false")))
		ev, _ := timedEvictions(c, time.Now())
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		res, err := New(c, Options{GracePeriodSeconds: -1, Policy: PolicyKeep}, nil).Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Evicted) != 1 || res.Evicted[0].Name != "web-1" {
			t.Errorf("evicted %v: want web-1 alone", res.Evicted)
		}
		for _, name := range []string{"batch-0", "ca-0"} {
			if _, sent := ev.when(name); sent {
				t.Errorf("an eviction was sent for %s, which asks not to be disrupted", name)
			}
			i := slices.IndexFunc(res.Remaining, func(p Pod) bool { return p.Name == name })
			if i < 0 || !errors.Is(res.Remaining[i].Err, ErrBlockedByPolicy) || !strings.Contains(res.Remaining[i].Reason, "voluntary") {
				t.Errorf("remaining %+v: want %s blocked by the pod policy", res.Remaining, name)
			}
		}
		if res.Done() {
			t.Error("Done() with pods the policy kept")
		}
		if ctx.Err() != nil {
			t.Error("the drain waited to its deadline for pods it does not evict")
		}
	})
}

// A forced drain (PolicyLast) evicts the other pods at once and a pod that
// asks not to be disrupted last, at the latest moment that lets its grace
// period (capped by GraceCap) run whole before the deadline, through the
// eviction API; with the policy off (PolicyIgnore) it goes with the others.
func TestPolicyLast(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policy   Policy
		cap      time.Duration
		own      int64
		deadline time.Duration
		at       time.Duration // the pod's eviction: at or after
		grace    int64
	}{
		{"its own grace period", PolicyLast, 0, 60, 10 * time.Minute, 10*time.Minute - 63*time.Second, 60},
		{"its grace period capped (a spot warning)", PolicyLast, 90 * time.Second, 300, 100 * time.Second, 100*time.Second - 93*time.Second, 90},
		{"policy off: evicted with the others", PolicyIgnore, 0, 60, 10 * time.Minute, 0, 60},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			c := fake.NewClientset(pod("apps", "web-1", managed), pod("apps", "batch-0", managed, grace(tc.own), annotated(AnnotationDoNotDisrupt, "true")))
			start := time.Now()
			ev, _ := timedEvictions(c, start)
			ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
			defer cancel()
			res, err := New(c, Options{GracePeriodSeconds: -1, Policy: tc.policy, GraceCap: tc.cap}, nil).Drain(ctx, nodeName)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Done() || len(res.Evicted) != 2 {
				t.Fatalf("result %+v: want both pods evicted", res)
			}
			web, _ := ev.when("web-1")
			at, sent := ev.when("batch-0")
			switch {
			case !sent:
				t.Fatal("batch-0 never evicted")
			case web > time.Second:
				t.Errorf("web-1 evicted at %s: want at once", web)
			case at < tc.at || at > tc.at+time.Second:
				t.Errorf("batch-0 evicted at %s: want at %s (the deadline %s less its grace period and %s)", at, tc.at, tc.deadline, lastLead)
			case tc.deadline-at < time.Duration(ev.grace["batch-0"])*time.Second:
				t.Errorf("batch-0 evicted %s before the deadline with a grace period of %d s: not whole", tc.deadline-at, ev.grace["batch-0"])
			}
			if tc.cap > 0 && ev.grace["batch-0"] != tc.grace {
				t.Errorf("batch-0 grace period %d s, want %d (capped)", ev.grace["batch-0"], tc.grace)
			}
		}))
	}
}

// A pod evicted last that ends on its own before its turn is not evicted
// at all, and the drain ends then.
func TestPolicyLastGoneOnItsOwn(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		c := fake.NewClientset(pod("apps", "web-1", managed), pod("apps", "batch-0", managed, annotated(AnnotationDoNotDisrupt, "true")))
		start := time.Now()
		ev, pods := timedEvictions(c, start)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		go func() {
			select { // the job ends on its own (outside the fake)
			case <-ctx.Done():
				return
			case <-time.After(time.Minute):
			}
			if err := pods.Delete("apps", "batch-0"); err != nil {
				t.Error(err)
			}
		}()
		res, err := New(c, Options{GracePeriodSeconds: -1, Policy: PolicyLast}, nil).Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if _, sent := ev.when("batch-0"); sent {
			t.Error("batch-0 was evicted, though it ended on its own before its turn")
		}
		if !res.Done() {
			t.Errorf("remaining %v: want none", res.Remaining)
		}
		if took := time.Since(start); took > time.Minute+time.Second {
			t.Errorf("the drain took %s: want it over once batch-0 went (1 m)", took)
		}
	})
}

// A pod evicted last is still under its PDB: a refusal holds it (it is
// never deleted), and it remains blocked by the PDB at the deadline.
func TestPolicyLastUnderItsPDB(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		c := fake.NewClientset(pod("apps", "batch-0", managed, grace(30), annotated(AnnotationSafeToEvict, "false")))
		ev, _ := timedEvictions(c, time.Now(), "batch-0")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		res, err := New(c, Options{GracePeriodSeconds: -1, Policy: PolicyLast, RetryCap: time.Second}, nil).Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if at, sent := ev.when("batch-0"); !sent || at < 5*time.Minute-33*time.Second {
			t.Errorf("batch-0 first asked at %s (sent %v): want at its turn, 33 s before the deadline", at, sent)
		}
		if len(res.Remaining) != 1 || !errors.Is(res.Remaining[0].Err, ErrBlockedByPDB) {
			t.Errorf("remaining %+v: want batch-0 blocked by its PDB", res.Remaining)
		}
		for _, a := range c.Actions() {
			if a.GetVerb() == "delete" && a.GetResource().Resource == "pods" {
				t.Errorf("drain deleted a pod instead of evicting it: %v", a)
			}
		}
	})
}

// Options.Deadline, later than the context's (a drain later invocations
// carry on), puts the turn of a pod evicted last past this invocation: it
// is not evicted in it, and remains, timed out.
func TestPolicyLastPastThisInvocation(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		c := fake.NewClientset(pod("apps", "batch-0", managed, annotated(AnnotationDoNotDisrupt, "true")))
		ev, _ := timedEvictions(c, time.Now())
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		res, err := New(c, Options{GracePeriodSeconds: -1, Policy: PolicyLast, Deadline: time.Now().Add(30 * time.Minute)}, nil).Drain(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		if _, sent := ev.when("batch-0"); sent {
			t.Error("batch-0 evicted before its turn")
		}
		if len(res.Remaining) != 1 || !errors.Is(res.Remaining[0].Err, ErrTimeout) || !strings.Contains(res.Remaining[0].Reason, "before its turn") {
			t.Errorf("remaining %+v: want batch-0 not evicted, the drain ended before its turn", res.Remaining)
		}
	})
}

// A dry run says what the policy would do with each such pod, and asks the
// eviction API nothing for a pod a voluntary drain keeps.
func TestDryRunPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		want   string
		asked  bool
	}{
		{PolicyKeep, "dry run: not evicted: blocked by pod policy: karpenter.sh/do-not-disrupt=true", false},
		{PolicyLast, "dry run: would evict last, 33s before the drain's deadline", true},
		{PolicyIgnore, "dry run: would evict", true},
	} {
		c := fake.NewClientset(pod("apps", "web-1", managed), pod("apps", "batch-0", managed, grace(30), annotated(AnnotationDoNotDisrupt, "true")))
		var asked []string
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() == "eviction" {
				asked = append(asked, a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name)
				return true, nil, nil
			}
			return false, nil, nil
		})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		plan, err := New(c, Options{GracePeriodSeconds: -1, Policy: tc.policy}, nil).DryRun(ctx, nodeName)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(plan.Pods, func(p Planned) bool { return p.Name == "batch-0" })
		if i < 0 || !strings.HasPrefix(plan.Pods[i].Reason, tc.want) {
			t.Errorf("policy %d: batch-0 planned %+v, want %q", tc.policy, plan.Pods, tc.want)
		}
		if slices.Contains(asked, "batch-0") != tc.asked {
			t.Errorf("policy %d: dry-run evictions %v: batch-0 asked %v, want %v", tc.policy, asked, !tc.asked, tc.asked)
		}
		if tc.policy == PolicyLast && !strings.Contains(plan.Order, string(TierPolicy)+": apps/batch-0") {
			t.Errorf("order %q: want batch-0 in %s", plan.Order, TierPolicy)
		}
	}
}
