package node

import (
	"context"
	"fmt"
	"strings"
	"time"

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

// Record writes one Event on the node (built by the constructors
// below); a failure to write is returned for logging, never fatal to
// the caller's flow.
func (r Recorder) Record(ctx context.Context, n *corev1.Node, e Event) error {
	if r.DryRun || n == nil {
		return nil
	}
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if r.Clock != nil {
		clk = r.Clock
	}
	now := metav1.NewTime(clk.Now())
	msg := e.Message
	if len(msg) > 1000 {
		msg = msg[:997] + "..."
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: n.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID,
		},
		Reason:              string(e.Reason),
		Message:             msg,
		Type:                typ,
		Source:              corev1.EventSource{Component: "node-drainer"},
		ReportingController: "node-drainer.io/node-drainer",
		ReportingInstance:   "node-drainer",
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Action:              string(e.Reason),
	}
	if _, err := r.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("recording event %s on node %s: %w", e.Reason, n.Name, err)
	}
	return nil
}

// Event is one Event node-drainer records on a Node: its reason, its type
// (Warning or Normal) and its message. Each is built by one of the
// constructors below, the one place its text is defined.
type Event struct {
	Reason  Reason
	Warning bool
	Message string
}

// EventDrainStarted: the node is marked for a drain on the event named on.
func EventDrainStarted(on string) Event {
	return Event{ReasonDrainStarted, false, fmt.Sprintf("draining on %s (cordoned, NoSchedule taint %s, excluded from load balancers)", on, TaintDraining)}
}

// EventDrainCompleted: the pods listed were evicted and are gone.
func EventDrainCompleted(evicted []string) Event {
	return Event{ReasonDrainCompleted, false, fmt.Sprintf("evicted %d pods: %s", len(evicted), strings.Join(evicted, ", "))}
}

// EventDrainCompletedDeadKubelet: a NotReady node's pods were evicted and
// not waited for (its kubelet is dead); those still bound are listed.
func EventDrainCompletedDeadKubelet(evicted int, stillBound []string) Event {
	return Event{ReasonDrainCompleted, true, fmt.Sprintf("node NotReady: evicted %d pods, not waiting for a dead kubelet; still bound: %s",
		evicted, strings.Join(stillBound, "; "))}
}

// EventDrainBlocked: the drain did not finish (after that long, when not
// zero); the pods still on the node are listed.
func EventDrainBlocked(after time.Duration, remaining []string) Event {
	if after == 0 {
		return Event{ReasonDrainBlocked, true, "drain not finished; pods still on the node: " + strings.Join(remaining, "; ")}
	}
	return Event{ReasonDrainBlocked, true, fmt.Sprintf("drain not finished after %s; pods still on the node: %s",
		after.Round(time.Second), strings.Join(remaining, "; "))}
}

// EventDrainFailed: the drain failed until its deadline, with err last.
func EventDrainFailed(err error) Event {
	return Event{ReasonDrainFailed, true, fmt.Sprintf("drain failed until the deadline: %v", err)}
}

// EventVolumesDetached: the volumes' attachments were deleted after waiting
// that long.
func EventVolumesDetached(waited time.Duration, pvs []string) Event {
	return Event{ReasonVolumesReleased, false, fmt.Sprintf("volumes detached (waited %s): %s", waited.Round(time.Millisecond), strings.Join(pvs, ", "))}
}

// EventVolumesNotDetached: the volumes left were not seen detached; what
// says how ("not detached in time", "not watched to the end (...)").
func EventVolumesNotDetached(what string, left []string) Event {
	return Event{ReasonVolumesReleased, true, fmt.Sprintf("volumes %s: %s", what, strings.Join(left, ", "))}
}

// EventCordonedOn: the node was cordoned on the event named on.
func EventCordonedOn(on string) Event {
	return Event{ReasonCordoned, false, "cordoned on " + on}
}

// EventCordonedFor: the node was cordoned, for the reason detail says (a
// scheduled change's window).
func EventCordonedFor(detail string) Event {
	return Event{ReasonCordoned, false, detail}
}

// EventOutOfService: the node of an instance down was released: cordoned,
// tainted out-of-service (when tainted), pods force-deleted and volume
// attachments deleted, in took; evidence is EC2's word.
func EventOutOfService(evidence string, tainted bool, podsDeleted, attachmentsDeleted []string, took time.Duration) Event {
	taint := ""
	if tainted {
		taint = ", tainted " + TaintOutOfService
	}
	return Event{ReasonOutOfService, true, fmt.Sprintf("%s: cordoned%s, force-deleted pods [%s], deleted volume attachments [%s] in %s",
		evidence, taint, strings.Join(podsDeleted, ", "), strings.Join(attachmentsDeleted, ", "), took.Round(time.Millisecond))}
}

// EventNotForced: nothing is forced on the node. Before anything was
// (begun false), evidence is EC2's word that the instance may still run;
// after, it is why the evidence read again stopped the release.
func EventNotForced(evidence string, begun bool) Event {
	if begun {
		return Event{ReasonNotForced, true, evidence + "; nothing more is forced"}
	}
	return Event{ReasonNotForced, true, evidence + "; the node is left as it is (no out-of-service taint, no force-deletion)"}
}

// EventRecovered: node-drainer's changes were undone, as detail says; for
// an instance running again, evidence is EC2's word ("" when none).
func EventRecovered(evidence, detail string) Event {
	if evidence == "" {
		return Event{ReasonRecovered, false, detail}
	}
	return Event{ReasonRecovered, false, evidence + ": " + detail}
}

// EventLifecycleCompleted: the lifecycle action of the hook of asg was
// completed with result (a Warning when it is not CONTINUE: failed).
func EventLifecycleCompleted(asg, hook, result string, failed bool) Event {
	return Event{ReasonLifecycleComplete, failed, fmt.Sprintf("lifecycle action %s/%s completed with %s", asg, hook, result)}
}

// EventContinued: the drain, running for that long, goes on in a new
// invocation (attempt); the pods still on the node are listed.
func EventContinued(running time.Duration, attempt int, remaining []string) Event {
	return Event{ReasonContinued, false, fmt.Sprintf("drain running for %s continues in a new invocation (attempt %d); still on the node: %s",
		running.Round(time.Second), attempt, strings.Join(remaining, "; "))}
}

// EventZombie: the node is NotReady since since while EC2 reports its
// instance running; why says what is done about it.
func EventZombie(since time.Time, instanceID, why string) Event {
	return Event{ReasonZombie, true, zombie(since, instanceID) + "; " + why}
}

// EventZombieReplaced: as EventZombie, and the instance was marked
// Unhealthy in asg, which replaces it.
func EventZombieReplaced(since time.Time, instanceID, asg string) Event {
	return Event{ReasonZombie, true, zombie(since, instanceID) +
		fmt.Sprintf("; instance marked Unhealthy in %s, which replaces it through its terminate hook (ZOMBIE_ACTION=replace)", asg)}
}

func zombie(since time.Time, instanceID string) string {
	return fmt.Sprintf("NotReady since %s while EC2 reports instance %s running", since.UTC().Format(time.RFC3339), instanceID)
}
