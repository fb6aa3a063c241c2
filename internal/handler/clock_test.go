package handler

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-drainer/node-drainer/internal/node"
)

// movingClock is the real clock read from an origin a test sets: it reads
// at(), plus the real time passed since at() last changed. A test sets the
// handler's time (an event's age, a drain's start) and the drain's pacing
// and waits still run on real timers, as the tests were written for.
type movingClock struct {
	clock.RealClock
	at func() time.Time

	mu           sync.Mutex
	seen, anchor time.Time
}

func newMovingClock(at func() time.Time) *movingClock { return &movingClock{at: at} }

func (c *movingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at := c.at(); !at.Equal(c.seen) || c.anchor.IsZero() {
		c.seen, c.anchor = at, time.Now()
	}
	return c.seen.Add(time.Since(c.anchor))
}

func (c *movingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// The handler's clock reaches the packages it calls: the Event recorded on
// the node is stamped with it, and the invocation lasts no time on a clock
// that does not move.
func TestWithClockReachesEveryPackage(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	since := at.Add(-time.Hour)
	n := newNode(idA, func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Spec.Taints = []corev1.Taint{{Key: node.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
		n.Annotations = map[string]string{node.AnnotationOwned: `{"reason":"out-of-service","since":"` + since.Format(time.RFC3339Nano) + `","cordoned":true,"outOfServiceTaint":true}`}
	})
	e := newEnv(n)
	e.ec2.readings[idA] = []reading{running}
	c := Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg}
	h := New(e.cfg, c, nil, WithClock(clocktesting.NewFakeClock(at)))
	out, err := e.handleWith(h, stateEvent(idA, "running", at), 5*time.Second)
	if err != nil || out.Action != ActionRecovered {
		t.Fatalf("outcome %+v, error %v: want recovered", out, err)
	}
	if out.DurationMS != 0 {
		t.Errorf("lasted %d ms on a clock that stood still", out.DurationMS)
	}
	list, err := e.kube.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("events %v, %v: want one", list, err)
	}
	if ev := list.Items[0]; !ev.FirstTimestamp.Time.Equal(at) || ev.Reason != string(node.ReasonRecovered) {
		t.Errorf("event %s at %v: want %s at the handler's %v", ev.Reason, ev.FirstTimestamp, node.ReasonRecovered, at)
	}
}
