package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// Cause is why node-drainer holds marks on a node. A node may be held for
// several causes at once (a rebalance cordon, then a spot warning, then the
// terminate hook); a mark goes only when no cause holds it any more.
type Cause string

// The causes.
const (
	CauseTerminate    Cause = "terminate"         // ASG terminate lifecycle hook
	CauseSpot         Cause = "spot-interruption" // spot interruption warning
	CauseRebalance    Cause = "rebalance"         // rebalance recommendation
	CauseScheduled    Cause = "scheduled-change"  // AWS Health scheduled change
	CauseOutOfService Cause = "out-of-service"    // the instance is confirmed down
	// CauseBatch: the node's instance is in Terminating:Wait under a hook
	// of ours in the group of an instance being drained (BATCH_CORDON):
	// cordoned only, so that the pods evicted elsewhere do not land on it;
	// its own drain is its own event's
	CauseBatch Cause = "batch-cordon"
)

// The causes of the capacity reservations' warnings.
const (
	CauseCapacityInterruption Cause = "capacity-reservation-interruption" // an interruptible Capacity Reservation's interruption warning
	CauseCapacityBlock        Cause = "capacity-block-expiration"         // a Capacity Block's expiration warning
)

// Mark says what a cause wants set on a node.
type Mark struct {
	Cause Cause
	// Expires is when the cause lapses by itself (advisory causes: the
	// instance still runs after their window); zero: never.
	Expires      time.Time
	Cordon       bool
	ExcludeLB    bool
	Draining     bool
	OutOfService bool
	// Conditions: the drain's Node conditions (DrainInProgress, Drained;
	// NODE_CONDITIONS) are node-drainer's to write, unless another writer's
	// are there (conditions.go)
	Conditions bool
	// IfSchedulable: the mark is written only on a node not cordoned yet,
	// as read at each try (a conflict reads again): one cordoned meanwhile,
	// by anyone, is left as it is and nothing is written (a batch cordon:
	// the cordon is what it is for)
	IfSchedulable bool
	// Renew, if set, is when this cause's present action began: a hold of
	// the cause that began before it is an earlier action's (a terminate
	// hold left on an instance that came back from a warm pool) and begins
	// again now, so that its Since says when this action began.
	Renew time.Time
	// Guard, if set, is asked before each attempt to write the mark, a
	// retry's included; its error stops the write (safety rule 11: a
	// forced mark, the out-of-service taint, is written only on fresh
	// evidence).
	Guard func(context.Context) error
}

// Changes says which marks were set (by ApplyTo) or removed (by Release) by
// node-drainer.
type Changes struct {
	Cordoned     bool `json:"cordoned,omitempty"`
	Labeled      bool `json:"excludedFromLB,omitempty"`
	Draining     bool `json:"drainTaint,omitempty"`
	OutOfService bool `json:"outOfServiceTaint,omitempty"`
	// Conditions: the drain's Node conditions (conditions.go), written on
	// the status, not by ApplyTo itself
	Conditions bool `json:"conditions,omitempty"`
}

// Any reports whether anything changed.
func (c Changes) Any() bool { return c != Changes{} }

func (c Changes) or(o Changes) Changes {
	return Changes{c.Cordoned || o.Cordoned, c.Labeled || o.Labeled, c.Draining || o.Draining, c.OutOfService || o.OutOfService, c.Conditions || o.Conditions}
}

func (c Changes) and(o Changes) Changes {
	return Changes{c.Cordoned && o.Cordoned, c.Labeled && o.Labeled, c.Draining && o.Draining, c.OutOfService && o.OutOfService, c.Conditions && o.Conditions}
}

func (c Changes) not() Changes {
	return Changes{!c.Cordoned, !c.Labeled, !c.Draining, !c.OutOfService, !c.Conditions}
}

// Hold is one cause's claim on the node: since when, until when, and the
// marks it wants.
type Hold struct {
	Since   time.Time  `json:"since"`
	Expires *time.Time `json:"expires,omitempty"`
	Wants   Changes    `json:"wants"`
	// Over is when the action that placed the hold ended (its lifecycle
	// action completed) while the node stays: a terminate hold of an
	// instance sent into a warm pool. Nothing counts from it any more: a
	// later action of the cause begins anew (Mark.Renew), and a drain
	// resumed from the node's record does not take its Since (nil: the
	// action may still run).
	Over *time.Time `json:"over,omitempty"`
}

// Expired reports whether the hold lapsed by now.
func (h Hold) Expired(now time.Time) bool { return h.Expires != nil && !now.Before(*h.Expires) }

// State is what the annotation records: the marks node-drainer placed
// itself (Owned), and the causes it holds the node for.
type State struct {
	Owned  Changes        `json:"owned"`
	Causes map[Cause]Hold `json:"causes"`
}

// Since is when the oldest cause began (zero: none).
func (s State) Since() time.Time {
	var t time.Time
	for _, h := range s.Causes {
		if t.IsZero() || h.Since.Before(t) {
			t = h.Since
		}
	}
	return t
}

// CauseList returns the causes held, sorted.
func (s State) CauseList() []Cause {
	return slices.Sorted(maps.Keys(s.Causes))
}

// legacy is the annotation's first format: one reason, overwritten by the
// next event. Read so that nodes marked by an older release are undone.
type legacy struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	Changes
}

// Marks returns what node-drainer recorded on the node; ok is false when
// nothing (or nothing readable) is recorded.
func Marks(n *corev1.Node) (State, bool) {
	v, ok := n.Annotations[AnnotationOwned]
	if !ok {
		return State{}, false
	}
	var s State
	if err := json.Unmarshal([]byte(v), &s); err == nil && s.Causes != nil {
		return s, true
	}
	var l legacy
	if err := json.Unmarshal([]byte(v), &l); err != nil || l.Reason == "" {
		return State{}, false
	}
	cause := Cause(l.Reason)
	if l.Reason == "cordon" {
		cause = CauseRebalance
	}
	return State{Owned: l.Changes, Causes: map[Cause]Hold{cause: {Since: l.Since, Wants: l.Changes}}}, true
}

// Holds reports whether node-drainer holds the node for cause.
func Holds(n *corev1.Node, cause Cause) bool {
	s, ok := Marks(n)
	_, held := s.Causes[cause]
	return ok && held
}

// ApplyTo records m's cause on a node the caller has just read, whole (n,
// as the apiserver returned it), and sets what it asks. A mark that is
// already there and not recorded as ours was set by someone else: it stays
// theirs. It returns the marks set now (none: the node was already marked,
// so ApplyTo is idempotent). The write is sent at once, at n's resourceVersion,
// without reading the node first. A conflict (the node changed since) reads
// it again; a node registered again under its name (another UID) is not
// marked, and the error matches ErrReplaced. An n without a resourceVersion
// is read first (its UID still pins the write): for a Node another writer is
// known to be changing right then.
func ApplyTo(ctx context.Context, c kubernetes.Interface, n *corev1.Node, m Mark, now time.Time, dryRun bool) (Changes, error) {
	return apply(ctx, c, n.Name, n, m, now, dryRun)
}

// ErrReplaced says the node's name now belongs to another Node (another
// UID) than the one read: what was meant for the first is not done to it.
var ErrReplaced = errors.New("node registered again under its name")

func apply(ctx context.Context, c kubernetes.Interface, name string, read *corev1.Node, m Mark, now time.Time, dryRun bool) (Changes, error) {
	var made Changes
	err := update(ctx, c, name, read, dryRun, m.Guard, func(n *corev1.Node, s *State) bool {
		made = Changes{}
		if m.IfSchedulable && n.Spec.Unschedulable {
			return false
		}
		made = setMarks(n, m, now)
		if m.Conditions && !s.Owned.Conditions && !hasDrainCondition(n) {
			made.Conditions = true // another writer's conditions stay theirs
		}
		wants := Changes{m.Cordon, m.ExcludeLB, m.Draining, m.OutOfService, m.Conditions}
		h, held := s.Causes[m.Cause]
		if !held || h.Since.Before(m.Renew) || h.Over != nil {
			h.Since, h.Over = now, nil // an action over is not this one
		}
		h.Wants = h.Wants.or(wants)
		if !m.Expires.IsZero() && (h.Expires == nil || m.Expires.After(*h.Expires)) {
			e := m.Expires
			h.Expires = &e
		}
		changed := made.Any() || !held || s.Causes[m.Cause] != h
		s.Causes[m.Cause] = h
		s.Owned = s.Owned.or(made)
		return changed
	})
	if err != nil {
		return Changes{}, fmt.Errorf("marking node %s (%s): %w", name, m.Cause, err)
	}
	return made, nil
}

// setMarks sets on n what m asks and n lacks (cordon, label, taints), and
// says which it set.
func setMarks(n *corev1.Node, m Mark, now time.Time) Changes {
	var made Changes
	if m.Cordon && !n.Spec.Unschedulable {
		n.Spec.Unschedulable, made.Cordoned = true, true
	}
	if m.ExcludeLB {
		if _, ok := n.Labels[LabelExcludeLB]; !ok {
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels[LabelExcludeLB], made.Labeled = "true", true
		}
	}
	if m.Draining && !HasTaint(n, TaintDraining) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintDraining, Value: string(m.Cause), Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: now}})
		made.Draining = true
	}
	if m.OutOfService && !HasTaint(n, TaintOutOfService) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: now}})
		made.OutOfService = true
	}
	return made
}

// Release drops cause from the node, and every cause that expired by now,
// and removes each mark node-drainer placed that no remaining cause wants.
// Marks placed by anyone else are never removed. It returns what was removed.
func Release(ctx context.Context, c kubernetes.Interface, name string, cause Cause, now time.Time, dryRun bool) (Changes, error) {
	return ReleaseHolds(ctx, c, name, map[Cause]time.Time{cause: {}}, now, dryRun)
}

// ReleaseHolds is Release for several causes in one update: each cause of
// holds goes if its hold began at the time given, the one the caller read
// with its evidence (zero: whenever it began). A hold of the cause begun
// since then (another action's, Mark.Renew) stays, with its marks.
func ReleaseHolds(ctx context.Context, c kubernetes.Interface, name string, holds map[Cause]time.Time, now time.Time, dryRun bool) (Changes, error) {
	var undone Changes
	// the conditions go before the record that they are ours (rule 10):
	// an update done whose answer was lost is retried on a node that no
	// longer says so, and a removal refused must find the record again at
	// the next release. The removal changes the node's resourceVersion,
	// so that the update after it meets a conflict and reads the node
	// again, which shows them gone: they are removed only from a node
	// that shows them
	strip := false
	unset := func(ctx context.Context) error {
		if !strip || dryRun {
			return nil
		}
		return removeDrainConditions(ctx, c, name, dryRun)
	}
	err := update(ctx, c, name, nil, dryRun, unset, func(n *corev1.Node, s *State) bool {
		undone = Changes{}
		before := len(s.Causes)
		for k, h := range s.Causes {
			since, named := holds[k]
			if (named && (since.IsZero() || h.Since.Equal(since))) || h.Expired(now) {
				delete(s.Causes, k)
			}
		}
		var wanted Changes
		for _, h := range s.Causes {
			wanted = wanted.or(h.Wants)
		}
		undone = s.Owned.and(wanted.not())
		if undone.Cordoned {
			n.Spec.Unschedulable = false
		}
		if undone.Labeled {
			delete(n.Labels, LabelExcludeLB)
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return (undone.Draining && t.Key == TaintDraining) || (undone.OutOfService && t.Key == TaintOutOfService)
		})
		s.Owned = s.Owned.and(undone.not())
		strip = undone.Conditions && hasDrainCondition(n)
		return undone.Any() || len(s.Causes) != before
	})
	if err != nil {
		var causes []string
		for _, k := range slices.Sorted(maps.Keys(holds)) {
			causes = append(causes, string(k))
		}
		return Changes{}, fmt.Errorf("unmarking node %s (%s): %w", name, strings.Join(causes, ", "), err)
	}
	return undone, nil
}

// EndHold records on the node that the action that placed cause's hold is
// over (Hold.Over): the hold and its marks stay, but nothing counts from it
// any more. A hold already over, or none, is left as it is.
func EndHold(ctx context.Context, c kubernetes.Interface, name string, cause Cause, now time.Time, dryRun bool) error {
	err := update(ctx, c, name, nil, dryRun, nil, func(_ *corev1.Node, s *State) bool {
		h, held := s.Causes[cause]
		if !held || h.Over != nil {
			return false
		}
		h.Over = &now
		s.Causes[cause] = h
		return true
	})
	if err != nil {
		return fmt.Errorf("recording on node %s that its %s action is over: %w", name, cause, err)
	}
	return nil
}

// update reads the node, lets change edit it and its State, and writes both
// back (with the node's resourceVersion: a conflict reads again) when change
// reports a change. read, when not nil and versioned, is the node as the
// caller has just read it: the first try starts from it instead of reading,
// and a node read again must have its UID. guard, if not nil, is asked
// before each write; its error ends the update. Dry run writes nothing.
func update(ctx context.Context, c kubernetes.Interface, name string, read *corev1.Node, dryRun bool, guard func(context.Context) error, change func(*corev1.Node, *State) bool) error {
	from := read
	if from != nil && from.ResourceVersion == "" {
		from = nil // nothing to pin the write to: read it first
	}
	return cluster.Retry(ctx, func() error {
		n := from
		from = nil // a conflict reads the node again
		if n == nil {
			var err error
			if n, err = c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
			if read != nil && read.UID != "" && n.UID != read.UID {
				return fmt.Errorf("%w: node %s is uid %s now, was %s", ErrReplaced, name, n.UID, read.UID)
			}
		}
		n = n.DeepCopy()
		s, _ := Marks(n)
		if s.Causes == nil {
			s.Causes = map[Cause]Hold{}
		}
		if !change(n, &s) || dryRun {
			return nil
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		if len(s.Causes) == 0 && !s.Owned.Any() {
			delete(n.Annotations, AnnotationOwned)
		} else {
			b, err := json.Marshal(s)
			if err != nil {
				return err
			}
			n.Annotations[AnnotationOwned] = string(b)
		}
		if guard != nil {
			if err := guard(ctx); err != nil {
				return err // not a Kubernetes error: Retry returns it as it is
			}
		}
		_, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
