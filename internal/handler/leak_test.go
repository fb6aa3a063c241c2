package handler

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/node-drainer/node-drainer/internal/node"
)

// slowEvents is the clientset whose Events of one reason are written
// late: each waits delay before it is written. The wait is held before the
// fake (which runs its reactors one at a time, under its lock).
type slowEvents struct {
	*fake.Clientset
	reason node.Reason
	delay  time.Duration
}

func (c slowEvents) CoreV1() typedcorev1.CoreV1Interface { return slowCore{c.Clientset.CoreV1(), c} }

type slowCore struct {
	typedcorev1.CoreV1Interface
	c slowEvents
}

func (s slowCore) Events(ns string) typedcorev1.EventInterface {
	return slowEventWrites{s.CoreV1Interface.Events(ns), s.c}
}

type slowEventWrites struct {
	typedcorev1.EventInterface
	c slowEvents
}

func (s slowEventWrites) Create(ctx context.Context, ev *corev1.Event, o metav1.CreateOptions) (*corev1.Event, error) {
	if ev.Reason == string(s.c.reason) {
		select {
		case <-time.After(s.c.delay):
		case <-ctx.Done():
		}
	}
	return s.EventInterface.Create(ctx, ev, o)
}

// invoke runs one invocation of h with a deadline timeout away, and says
// which goroutines begun during it still run once it returned (nil: none,
// goleak retrying a short while for those ending): work the invocation
// left behind, which Lambda would freeze, to resume with a dead context in
// a later invocation. None of the tests runs two invocations at once.
func invoke(h *Handler, payload []byte, timeout time.Duration) (Outcome, error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	before := goleak.IgnoreCurrent()
	out, err := h.Handle(ctx, payload)
	return out, err, goleak.Find(before)
}

// leftRunning gathers what invocations made without a *testing.T left
// running (env.handleWith); TestMain fails the package on any.
var leftRunning leftovers

type leftovers struct {
	mu    sync.Mutex
	found []string
}

func (l *leftovers) add(payload []byte, left error) {
	if left == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.found = append(l.found, fmt.Sprintf("invocation %.200s: %v", payload, left))
}

// TestMain fails the package on work an invocation left running, and on
// any goroutine still running once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range leftRunning.found {
		fmt.Fprintln(os.Stderr, "work left running after the handler returned:", f)
		code = 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goroutines left running after the tests:", err)
		code = 1
	}
	os.Exit(code)
}

// A Health event for two instances handled in parallel in one invocation
// (no self-invocation): each drain's late work (the Event "drain
// completed", the VolumeAttachments read ahead) is done when the handler
// returns, and nothing it started runs on after (C9).
func TestScheduledInParallelLeavesNothingRunning(t *testing.T) {
	e := newEnv(newNode(idA), pod(idA, "apps", "web-1"), newNode(idB), pod(idB, "apps", "web-2"))
	e.cfg.ContinueLongDrains = false
	e.ec2.readings[idA] = []reading{running}
	e.ec2.readings[idB] = []reading{running}
	h := e.handler()
	h.c.Kube = slowEvents{Clientset: e.kube, reason: node.ReasonDrainCompleted, delay: time.Second}
	out, err, left := invoke(h, scheduledEvent(idA, idB), 10*time.Second)
	if left != nil {
		t.Errorf("work left running after the handler returned: %v", left)
	}
	if err != nil || out.Action != ActionPerInstance || len(out.Instances) != 2 {
		t.Fatalf("outcome %+v, %v; want %s with 2 instances", out, err, ActionPerInstance)
	}
	for _, o := range out.Instances {
		if o.Action != ActionDrained {
			t.Errorf("instance %s: %s, want drained", o.Instance, o.Action)
		}
	}
	list, err := e.kube.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	completed := map[string]bool{}
	for _, ev := range list.Items {
		if ev.Reason == string(node.ReasonDrainCompleted) {
			completed[ev.InvolvedObject.Name] = true
		}
	}
	if !completed[nodeName(idA)] || !completed[nodeName(idB)] {
		t.Errorf("Events %s when the handler returned: %v, want both nodes", node.ReasonDrainCompleted, completed)
	}
}
