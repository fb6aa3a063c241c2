package handler

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/outcome"
)

// protectedPod is pod with an annotation asking not to be disrupted, and
// a grace period of its own.
func protectedPod(id, ns, name, key, value string, grace int64) *corev1.Pod {
	p := pod(id, ns, name)
	p.Annotations = map[string]string{key: value}
	p.Spec.TerminationGracePeriodSeconds = &grace
	return p
}

// scheduledAt is a scheduled change for id starting at start.
func scheduledAt(id string, start time.Time) []byte {
	return envelope("aws.health", "AWS Health Event", time.Now(), map[string]any{
		"service": "EC2", "eventTypeCategory": "scheduledChange", "eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
		"eventArn": "arn:aws:health:us-east-1::event/EC2/x/y", "statusCode": "open",
		"startTime": start.UTC().Format("Mon, 2 Jan 2006 15:04:05 GMT"), "affectedEntities": []map[string]string{{"entityValue": id}},
	})
}

// Which drains are voluntary and which forced (docs/configuration.md#pod-policy).
func TestPodPolicyByCause(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		policy config.PodPolicy
		cause  node.Cause
		start  time.Time // a scheduled change's
		want   drain.Policy
	}{
		{"ignored: nothing apart", config.PodPolicyIgnore, node.CauseRebalance, time.Time{}, drain.PolicyIgnore},
		{"rebalance: voluntary", config.PodPolicyHonor, node.CauseRebalance, time.Time{}, drain.PolicyKeep},
		{"scheduled change before its start: voluntary", config.PodPolicyHonor, node.CauseScheduled, now.Add(10 * time.Minute), drain.PolicyKeep},
		{"scheduled change at its start: forced", config.PodPolicyHonor, node.CauseScheduled, now.Add(-time.Second), drain.PolicyLast},
		{"terminate hook: forced", config.PodPolicyHonor, node.CauseTerminate, time.Time{}, drain.PolicyLast},
		{"spot warning: forced", config.PodPolicyHonor, node.CauseSpot, time.Time{}, drain.PolicyLast},
		{"capacity reservation warning: forced", config.PodPolicyHonor, node.CauseCapacityInterruption, time.Time{}, drain.PolicyLast},
		{"capacity block expiry: forced", config.PodPolicyHonor, node.CauseCapacityBlock, time.Time{}, drain.PolicyLast},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			e.cfg.PodPolicy = tc.policy
			e.now = now
			var payload []byte
			switch {
			case !tc.start.IsZero():
				payload = scheduledAt(idA, tc.start)
			default:
				payload = rebalanceEvent(idA)
			}
			r := &invocation{h: e.handler()}
			ev, err := event.Parse(payload)
			if err != nil {
				t.Fatal(err)
			}
			r.ev = ev
			if got := (&nodeDrain{r}).podPolicy(tc.cause); got != tc.want {
				t.Errorf("policy %d, want %d", got, tc.want)
			}
		})
	}
}

// A rebalance recommendation's drain (voluntary) with POD_POLICY=honor
// evicts the other pods and not the one that asks not to be disrupted: the
// node is cordoned, the drain reported blocked by that pod at once (the
// Node's Event, the outcome's remaining, a Node Drain Blocked event well
// before OUTCOME_BLOCKED_AFTER). With the policy ignored (the default) the
// pod is evicted as before.
func TestPodPolicyVoluntaryDrainKeeps(t *testing.T) {
	for _, policy := range []config.PodPolicy{config.PodPolicyIgnore, config.PodPolicyHonor} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(newNode(idA), pod(idA, "apps", "web-1"), protectedPod(idA, "apps", "batch-0", drain.AnnotationDoNotDisrupt, "true", 30))
			e.ec2.readings[idA] = []reading{running}
			e.cfg.RebalanceAction = config.ActionDrain
			e.cfg.PodPolicy = policy
			e.cfg.OutcomeBlockedAfter = 5 * time.Minute
			h, bus := withBus(e)
			out, err := e.handleWith(h, rebalanceEvent(idA), 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !e.node(t, idA).Spec.Unschedulable {
				t.Error("node not cordoned")
			}
			blocked := slices.Index(bus.entries, string(outcome.NodeDrainBlocked))
			if policy == config.PodPolicyIgnore {
				if len(e.evicted) != 2 || blocked >= 0 {
					t.Errorf("evicted %v, outcomes %v: want both pods evicted, no blocked drain", e.evicted, bus.entries)
				}
				return
			}
			if !slices.Equal(e.evicted, []string{"apps/web-1"}) || !e.podExists("apps", "batch-0") {
				t.Errorf("evicted %v: want apps/web-1 alone, batch-0 left", e.evicted)
			}
			if len(out.Remaining) != 1 || !strings.HasPrefix(out.Remaining[0], "apps/batch-0: blocked by pod policy: karpenter.sh/do-not-disrupt=true") {
				t.Errorf("remaining %v: want batch-0 blocked by the pod policy", out.Remaining)
			}
			if e.events(t)[string(node.ReasonDrainBlocked)] != corev1.EventTypeWarning {
				t.Errorf("events %v: want %s", e.events(t), node.ReasonDrainBlocked)
			}
			if blocked < 0 {
				t.Fatalf("outcomes %v: want %s at once", bus.entries, outcome.NodeDrainBlocked)
			}
			d := bus.details[blocked]
			if err := outcome.Validate(outcome.NodeDrainBlocked, d); err != nil {
				t.Error(err)
			}
			if len(d.Remaining) != 1 || d.Remaining[0].Pod != "apps/batch-0" || !strings.Contains(d.Remaining[0].HeldBy, "pod policy") || d.BlockedSeconds >= 300 {
				t.Errorf("blocked detail %+v: want batch-0 held by the pod policy, not blocked for OUTCOME_BLOCKED_AFTER", d)
			}
		})
	}
}

// A terminate hook's drain (forced) with POD_POLICY=honor evicts the pod
// that asks not to be disrupted last: its grace period whole before the
// drain's deadline (DRAIN_TIMEOUT), the other pods at once; then the hook
// is completed. The clock is the bubble's.
func TestPodPolicyForcedDrainEvictsLast(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(newNode(idA), pod(idA, "apps", "web-1"), protectedPod(idA, "apps", "batch-0", drain.AnnotationSafeToEvict, "false", 60))
		e.ec2.readings[idA] = []reading{running}
		e.cfg.PodPolicy = config.PodPolicyHonor
		e.cfg.DrainTimeout = 3 * time.Minute
		e.cfg.ContinueLongDrains = false
		start := time.Now()
		var mu sync.Mutex
		at := map[string]time.Duration{}
		e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() == "eviction" {
				mu.Lock()
				at[a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name] = time.Since(start)
				mu.Unlock()
			}
			return false, nil, nil // the env's reactor answers
		})
		out, err := e.handle(t, terminateEvent(idA), 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if at["web-1"] > time.Second {
			t.Errorf("web-1 evicted at %s: want at once", at["web-1"])
		}
		// the deadline 3 m, less its 60 s and lastLead (3 s)
		if b, ok := at["batch-0"]; !ok || b < 117*time.Second || b > 118*time.Second {
			t.Errorf("batch-0 evicted at %s (%v): want at 1m57s, its 60 s whole before the 3 m deadline", b, ok)
		}
		if out.Action != ActionDrained || len(e.asg.results()) != 1 || e.asg.results()[0] != lifecycle.Continue {
			t.Errorf("outcome %+v, hook %v: want drained, completed CONTINUE", out, e.asg.results())
		}
	})
}

// A dry run of a voluntary drain says what the policy would do with each
// such pod, and asks the eviction API nothing for it.
func TestPodPolicyDryRun(t *testing.T) {
	e := newEnv(newNode(idA), pod(idA, "apps", "web-1"), protectedPod(idA, "apps", "batch-0", drain.AnnotationDoNotDisrupt, "true", 30))
	e.ec2.readings[idA] = []reading{running}
	e.cfg.RebalanceAction = config.ActionDrain
	e.cfg.PodPolicy = config.PodPolicyHonor
	e.cfg.DryRun = true
	out, err := e.handle(t, rebalanceEvent(idA), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out.Plan == nil || !slices.ContainsFunc(out.Plan.Evict, func(s string) bool {
		return strings.HasPrefix(s, "apps/batch-0: dry run: not evicted: blocked by pod policy")
	}) {
		t.Fatalf("plan %+v: want batch-0 not evicted, blocked by the pod policy", out.Plan)
	}
	if !slices.ContainsFunc(out.Plan.WouldBlock, func(s string) bool { return strings.HasPrefix(s, "apps/batch-0") }) {
		t.Errorf("would block %v: want batch-0", out.Plan.WouldBlock)
	}
	if slices.Contains(e.dryRunEvictions, "apps/batch-0") || !slices.Contains(e.dryRunEvictions, "apps/web-1") {
		t.Errorf("dry-run evictions %v: want web-1's alone", e.dryRunEvictions)
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("a dry run wrote %v", w)
	}
}

// A zombie's replacement is voluntary: with POD_POLICY=honor, a zombie
// whose node holds a pod that asks not to be disrupted is not marked
// Unhealthy; the sweep says why on the Node. Ignored, it is replaced.
func TestPodPolicyHoldsZombieReplacement(t *testing.T) {
	for _, policy := range []config.PodPolicy{config.PodPolicyIgnore, config.PodPolicyHonor} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(newNode(idB, notReadySince(time.Now().Add(-time.Hour))),
				protectedPod(idB, "apps", "batch-0", drain.AnnotationDoNotDisrupt, "true", 30))
			e.ec2.readings[idB] = []reading{{state: instance.StateRunning, tagged: true}}
			e.cfg.ZombieAfter, e.cfg.ZombieMaxPerSweep, e.cfg.ZombieMaxASGShare = 10*time.Minute, 1, 0.5
			e.cfg.ZombieAction = config.ZombieReplace
			e.cfg.PodPolicy = policy
			e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName), Instances: []astypes.Instance{
				{InstanceId: aws.String(idB), LifecycleState: astypes.LifecycleStateInService, HealthStatus: aws.String("Healthy")}}}}
			out, err := e.handle(t, sweepEvent(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			replaced := slices.Equal(e.asg.unhealthy, []string{idB})
			if replaced != (policy == config.PodPolicyIgnore) || slices.Contains(out.Sweep.Replaced, idB) != replaced {
				t.Errorf("SetInstanceHealth on %v, replaced %v: want replaced %v", e.asg.unhealthy, out.Sweep.Replaced, policy == config.PodPolicyIgnore)
			}
			if policy == config.PodPolicyHonor && !strings.Contains(e.eventMessage(t, string(node.ReasonZombie)), "not replaced: apps/batch-0: blocked by pod policy") {
				t.Errorf("zombie Event %q: want it to name batch-0", e.eventMessage(t, string(node.ReasonZombie)))
			}
		})
	}
}

// eventMessage is the message of the Event of that reason ("" none).
func (e *env) eventMessage(t *testing.T, reason string) string {
	t.Helper()
	list, err := e.kube.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		if ev.Reason == reason {
			return ev.Message
		}
	}
	return ""
}
