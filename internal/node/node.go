// Package node finds the Kubernetes node of an EC2 instance and marks or
// unmarks it: the exclude-from-load-balancers label, node-drainer's own
// NoSchedule taint, the cordon and the out-of-service taint. What node-drainer
// itself changed is recorded in an annotation on the node, so that undoing it
// later never removes a taint or a cordon somebody else set.
package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

const (
	// LabelExcludeLB takes the node out of external load balancers' targets.
	LabelExcludeLB = "node.kubernetes.io/exclude-from-external-load-balancers"
	// TaintDraining is node-drainer's own NoSchedule taint.
	TaintDraining = "node-drainer.io/draining"
	// TaintOutOfService is Kubernetes' out-of-service taint (GA in 1.28):
	// pods without a matching toleration are deleted and volumes detached.
	TaintOutOfService = "node.kubernetes.io/out-of-service"
	// AnnotationOwned records, as JSON, what node-drainer changed on the node.
	AnnotationOwned = "node-drainer.io/changes"
)

// ErrNotFound means the instance has no node in this cluster.
var ErrNotFound = errors.New("node not found")

// Find returns the node of an instance: by name (EKS names nodes after the
// private DNS name), else by spec.providerID (aws:///<az>/<instance-id>).
func Find(ctx context.Context, c kubernetes.Interface, privateDNS, instanceID string) (*corev1.Node, error) {
	if privateDNS != "" {
		var n *corev1.Node
		err := cluster.Retry(func() (err error) {
			n, err = c.CoreV1().Nodes().Get(ctx, privateDNS, metav1.GetOptions{})
			return err
		})
		if err == nil && (n.Spec.ProviderID == "" || ProviderInstanceID(n.Spec.ProviderID) == instanceID) {
			return n, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting node %s: %w", privateDNS, err)
		}
	}
	var list *corev1.NodeList
	err := cluster.Retry(func() (err error) {
		list, err = c.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	for i := range list.Items {
		if ProviderInstanceID(list.Items[i].Spec.ProviderID) == instanceID {
			return &list.Items[i], nil
		}
	}
	return nil, fmt.Errorf("%w: no node named %q or with provider id of %s", ErrNotFound, privateDNS, instanceID)
}

// ProviderInstanceID returns the instance id of an AWS providerID
// (aws:///us-east-1a/i-0123...), or "".
func ProviderInstanceID(providerID string) string {
	if !strings.HasPrefix(providerID, "aws://") {
		return ""
	}
	id := providerID[strings.LastIndex(providerID, "/")+1:]
	if !strings.HasPrefix(id, "i-") {
		return ""
	}
	return id
}

// Changes is what node-drainer did to a node (and so may undo).
type Changes struct {
	Reason       string    `json:"reason"` // drain, cordon or out-of-service
	Since        time.Time `json:"since"`
	Cordoned     bool      `json:"cordoned,omitempty"`
	Labeled      bool      `json:"excludedFromLB,omitempty"`
	Draining     bool      `json:"drainTaint,omitempty"`
	OutOfService bool      `json:"outOfServiceTaint,omitempty"`
}

// Mark says what to set on a node.
type Mark struct {
	Reason       string
	Cordon       bool
	ExcludeLB    bool
	Draining     bool
	OutOfService bool
}

// Owned returns what node-drainer recorded on the node.
func Owned(n *corev1.Node) (Changes, bool) {
	var c Changes
	v, ok := n.Annotations[AnnotationOwned]
	if !ok || json.Unmarshal([]byte(v), &c) != nil {
		return Changes{}, false
	}
	return c, true
}

// Apply sets what m asks on the node and records what it changed itself; what
// was already so is left unrecorded (someone else owns it). It returns the
// changes made now (empty when the node was already marked: idempotent).
func Apply(ctx context.Context, c kubernetes.Interface, name string, m Mark, now time.Time, dryRun bool) (Changes, error) {
	var made Changes
	err := cluster.Retry(func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n = n.DeepCopy()
		owned, _ := Owned(n)
		made = Changes{Reason: m.Reason, Since: now}
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
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintDraining, Value: m.Reason, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: now}})
			made.Draining = true
		}
		if m.OutOfService && !HasTaint(n, TaintOutOfService) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: now}})
			made.OutOfService = true
		}
		if made == (Changes{Reason: m.Reason, Since: now}) || dryRun {
			return nil
		}
		merged := Changes{
			Reason:       m.Reason,
			Since:        now,
			Cordoned:     owned.Cordoned || made.Cordoned,
			Labeled:      owned.Labeled || made.Labeled,
			Draining:     owned.Draining || made.Draining,
			OutOfService: owned.OutOfService || made.OutOfService,
		}
		if !owned.Since.IsZero() {
			merged.Since = owned.Since
		}
		b, _ := json.Marshal(merged)
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[AnnotationOwned] = string(b)
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return Changes{}, fmt.Errorf("marking node %s: %w", name, err)
	}
	return made, nil
}

// Revert undoes what node-drainer recorded on the node and nothing else: a
// cordon or taint someone else set stays. It returns what was undone.
func Revert(ctx context.Context, c kubernetes.Interface, name string, dryRun bool) (Changes, error) {
	var undone Changes
	err := cluster.Retry(func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		owned, ok := Owned(n)
		undone = owned
		if !ok || dryRun {
			return nil
		}
		n = n.DeepCopy()
		if owned.Cordoned {
			n.Spec.Unschedulable = false
		}
		if owned.Labeled {
			delete(n.Labels, LabelExcludeLB)
		}
		kept := n.Spec.Taints[:0]
		for _, t := range n.Spec.Taints {
			if (owned.Draining && t.Key == TaintDraining) || (owned.OutOfService && t.Key == TaintOutOfService) {
				continue
			}
			kept = append(kept, t)
		}
		n.Spec.Taints = kept
		delete(n.Annotations, AnnotationOwned)
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return Changes{}, fmt.Errorf("unmarking node %s: %w", name, err)
	}
	return undone, nil
}

// Ready reports whether the node's Ready condition is True.
func Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// HasTaint reports whether the node carries a taint with key.
func HasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
