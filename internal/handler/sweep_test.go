package handler

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

func sweepEvent() []byte {
	return envelope("aws.events", "Scheduled Event", time.Now(), map[string]string{})
}

// waitingGroup is asgName with id waiting in Terminating:Wait on the terminate hook.
func waitingGroup(a *fakeASG, id string) {
	a.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName), Instances: []astypes.Instance{
		{InstanceId: aws.String(id), LifecycleState: astypes.LifecycleStateTerminatingWait, HealthStatus: aws.String("Healthy")}}}}
	a.hooks = []astypes.LifecycleHook{{LifecycleHookName: aws.String("node-drainer-terminate"),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300)}}
}

// TestSweepCompletesForgottenHook: a terminate hook whose event never came
// is drained and completed by instance id (there is no token to name).
func TestSweepCompletesForgottenHook(t *testing.T) {
	e := newEnv(newNode(idA), pod(idA, "apps", "web-1"))
	e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true}}
	waitingGroup(e.asg, idA)
	out, err := e.handle(t, sweepEvent(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != ActionSwept || out.Sweep == nil || !slices.Equal(out.Sweep.Hooks, []string{idA}) {
		t.Fatalf("outcome %+v sweep %+v: want swept, hook of %s handled", out, out.Sweep, idA)
	}
	if e.podExists("apps", "web-1") {
		t.Error("the node was not drained")
	}
	if len(e.asg.completed) != 1 {
		t.Fatalf("completions %v, want one", e.asg.completed)
	}
	c := e.asg.completed[0]
	if c.LifecycleActionToken != nil || aws.ToString(c.InstanceId) != idA || aws.ToString(c.LifecycleHookName) != "node-drainer-terminate" ||
		e.asg.results()[0] != lifecycle.Continue {
		t.Errorf("completion %+v: want by instance id %s, no token, CONTINUE", c, idA)
	}
}

// TestSweepActsOnNothingWithoutCompleteReadings: a list or a describe that
// fails leaves everything as it is, and says so.
func TestSweepActsOnNothingWithoutCompleteReadings(t *testing.T) {
	for name, fail := range map[string]func(e *env){
		"nodes":  func(e *env) { e.fail("list", "nodes", apierrors.NewInternalError(errors.New("etcd down"))) },
		"leases": func(e *env) { e.fail("list", "leases", apierrors.NewServiceUnavailable("unavailable")) },
		"ec2":    func(e *env) { e.ec2.readings[idA] = []reading{{err: errors.New("throttled")}} },
		"pods": func(e *env) {
			e.fail("list", "pods", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no")))
		},
		"volumes": func(e *env) { e.fail("list", "volumeattachments", apierrors.NewTimeoutError("slow", 1)) },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(newNode(idA), pod(idA, "apps", "web-1"), newNode(idB), pod(idB, "apps", "db-0"))
			e.ec2.readings[idA] = []reading{{state: instance.StateRunning, tagged: true}}
			e.ec2.readings[idB] = []reading{{state: instance.StateStopped, tagged: true}} // dead: pods to release
			waitingGroup(e.asg, idA)
			fail(e)
			out, err := e.handle(t, sweepEvent(), 1500*time.Millisecond)
			if err == nil || out.Action != ActionFailed {
				t.Errorf("outcome %+v, %v: want failed with an error", out, err)
			}
			if w := e.writes(); len(w) != 0 {
				t.Errorf("writes %v, want none", w)
			}
			if len(e.asg.completed) != 0 {
				t.Errorf("completed %v, want nothing", e.asg.completed)
			}
		})
	}
}

// TestSweepReleasesDeadNodeAndReportsZombie: a stopped instance's node is
// released through the abrupt path; a node NotReady on a running instance
// is reported, and marked Unhealthy only when asked.
func TestSweepReleasesDeadNodeAndReportsZombie(t *testing.T) {
	for _, replace := range []bool{false, true} {
		e := newEnv(newNode(idA, notReadySince(time.Now().Add(-time.Hour))), pod(idA, "apps", "web-1"),
			newNode(idB, notReadySince(time.Now().Add(-time.Hour))))
		e.ec2.readings[idA] = []reading{{state: instance.StateStopped, tagged: true}}
		e.ec2.readings[idB] = []reading{{state: instance.StateRunning, tagged: true}}
		e.cfg.ZombieAfter, e.cfg.ZombieMaxPerSweep, e.cfg.ZombieMaxASGShare = 10*time.Minute, 1, 0.5
		if replace {
			e.cfg.ZombieAction = "replace"
		}
		e.asg.groups = []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String(asgName), Instances: []astypes.Instance{
			{InstanceId: aws.String(idB), LifecycleState: astypes.LifecycleStateInService, HealthStatus: aws.String("Healthy")}}}}
		out, err := e.handle(t, sweepEvent(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out.Sweep.Dead, []string{idA}) || e.podExists("apps", "web-1") {
			t.Errorf("replace=%v: dead %v, pod there %v: want %s released", replace, out.Sweep.Dead, e.podExists("apps", "web-1"), idA)
		}
		if !slices.Equal(out.Sweep.Zombies, []string{nodeName(idB)}) || e.events(t)["NodeDrainerZombie"] != "Warning" {
			t.Errorf("replace=%v: zombies %v events %v: want %s reported with a Warning", replace, out.Sweep.Zombies, e.events(t), nodeName(idB))
		}
		if replace != slices.Equal(e.asg.unhealthy, []string{idB}) || replace != slices.Equal(out.Sweep.Replaced, []string{idB}) {
			t.Errorf("replace=%v: SetInstanceHealth on %v, replaced %v", replace, e.asg.unhealthy, out.Sweep.Replaced)
		}
	}
}

// notReadySince makes a node NotReady (its kubelet silent) since t.
func notReadySince(t time.Time) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(t)}}
	}
}
