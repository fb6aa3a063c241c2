package node

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Reason is the reason of an Event node-drainer records on a Node.
type Reason string

// Event reasons node-drainer records on a Node.
const (
	ReasonDrainStarted      Reason = "NodeDrainerDrainStarted"
	ReasonDrainCompleted    Reason = "NodeDrainerDrainCompleted"
	ReasonDrainBlocked      Reason = "NodeDrainerDrainBlocked"
	ReasonDrainFailed       Reason = "NodeDrainerDrainFailed"
	ReasonVolumesReleased   Reason = "NodeDrainerVolumesReleased"
	ReasonCordoned          Reason = "NodeDrainerCordoned"
	ReasonOutOfService      Reason = "NodeDrainerOutOfService"
	ReasonNotForced         Reason = "NodeDrainerNotForced"
	ReasonRecovered         Reason = "NodeDrainerRecovered"
	ReasonLifecycleComplete Reason = "NodeDrainerLifecycleCompleted"
	ReasonContinued         Reason = "NodeDrainerContinued"
	ReasonZombie            Reason = "NodeDrainerZombie"
)

// Recorder writes Events on Nodes synchronously. client-go's broadcaster
// sends them from a goroutine after the call returns, which a Lambda may
// freeze or end first; an Event is evidence here, so it is written in line.
type Recorder struct {
	Client kubernetes.Interface
	DryRun bool
	// Clock stamps the Events (nil: the real clock).
	Clock clock.PassiveClock
}

// Record writes one Event on the node; a failure to write is returned for
// logging, never fatal to the caller's flow.
func (r Recorder) Record(ctx context.Context, n *corev1.Node, warning bool, reason Reason, format string, args ...any) error {
	if r.DryRun || n == nil {
		return nil
	}
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if r.Clock != nil {
		clk = r.Clock
	}
	now := metav1.NewTime(clk.Now())
	msg := fmt.Sprintf(format, args...)
	if len(msg) > 1000 {
		msg = msg[:997] + "..."
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: n.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID,
		},
		Reason:              string(reason),
		Message:             msg,
		Type:                typ,
		Source:              corev1.EventSource{Component: "node-drainer"},
		ReportingController: "node-drainer.io/node-drainer",
		ReportingInstance:   "node-drainer",
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Action:              string(reason),
	}
	if _, err := r.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("recording event %s on node %s: %w", reason, n.Name, err)
	}
	return nil
}
