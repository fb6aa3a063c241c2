package handler

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/outcome"
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
// waiting a short while for those ending): work the invocation left
// behind, which Lambda would freeze, to resume with a dead context in a
// later invocation. None of the tests runs two invocations at once.
func invoke(h *Handler, payload []byte, timeout time.Duration) (Outcome, error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	before := goroutines()
	out, err := h.Handle(ctx, payload)
	return out, err, leftSince(before)
}

// goroutines are the stacks of the goroutines running now, by their
// header ("goroutine 12"). A check of our own rather than go.uber.org/goleak:
// the product's go.mod holds only what the function links (test/deploy's
// TestProductModuleHoldsWhatTheFunctionLinks), and the check is this much.
func goroutines() map[string]string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if head, _, ok := strings.Cut(g, " ["); ok {
			all[head] = g
		}
	}
	return all
}

// leftSince says which goroutines not running at before (nor this one)
// still run, waiting up to leakWait for those that are ending; nil: none.
func leftSince(before map[string]string) error {
	self := make([]byte, 64)
	me, _, _ := strings.Cut(string(self[:runtime.Stack(self, false)]), " [")
	end := time.Now().Add(leakWait)
	for {
		var left []string
		for head, stack := range goroutines() {
			if _, was := before[head]; !was && head != me && !testingOwn(stack) {
				left = append(left, stack)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(end) {
			slices.Sort(left)
			return fmt.Errorf("found unexpected goroutines:\n%s", strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leakWait is how long a goroutine begun by an invocation may take to end
// once the handler returned (a watch closing, a timer's goroutine).
const leakWait = 2 * time.Second

// testingOwn says whether stack is the test runner's own (the main test
// goroutine, a test's, the timeout alarm), not the code's.
func testingOwn(stack string) bool {
	return strings.Contains(stack, "testing.(*M).") || strings.Contains(stack, "testing.tRunner") || strings.Contains(stack, "testing.runTests")
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
	before := goroutines()
	code := m.Run()
	for _, f := range leftRunning.found {
		fmt.Fprintln(os.Stderr, "work left running after the handler returned:", f)
		code = 1
	}
	if err := leftSince(before); err != nil {
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

// The check itself: a goroutine begun since the snapshot and still
// running is found, with its stack; once it ended, nothing is.
func TestLeftSinceFindsAGoroutineLeftRunning(t *testing.T) {
	before := goroutines()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); <-stop }()
	if err := leftSince(before); err == nil || !strings.Contains(err.Error(), "TestLeftSinceFindsAGoroutineLeftRunning") {
		t.Errorf("leftSince = %v; want the goroutine left running, its stack naming this test", err)
	}
	close(stop)
	<-done
	if err := leftSince(before); err != nil {
		t.Errorf("leftSince once it ended = %v; want nil", err)
	}
}

// A Capacity Block's instances handled in this invocation: as a Health
// event's (above), each drain's late work is done when the handler
// returns, and each instance's drain tells Node Drained (C8, C9).
func TestCapacityBlockInParallelLeavesNothingRunning(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := blockEnv()
		e.lam = nil
		h, bus := withBus(e)
		h.c.Kube = slowEvents{Clientset: e.kube, reason: node.ReasonDrainCompleted, delay: time.Second}
		out, err, left := invoke(h, capacityBlockEvent(blockCR, time.Now()), 10*time.Second)
		if left != nil {
			t.Errorf("work left running after the handler returned: %v", left)
		}
		if err != nil || out.Action != ActionPerInstance || len(out.Instances) != 2 {
			t.Fatalf("outcome %+v, %v; want %s with 2 instances", out, err, ActionPerInstance)
		}
		drained := 0
		for _, ev := range bus.entries {
			if ev == string(outcome.NodeDrained) {
				drained++
			}
		}
		if drained != 2 {
			t.Errorf("put %v: want a Node Drained for each of the block's two instances (instances %+v)", bus.entries, out.Instances)
		}
	})
}
