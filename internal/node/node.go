// Package node finds the Kubernetes node of an EC2 instance, reads and
// deletes it, reads and watches its kubelet's Lease (kube-node-lease),
// records Events on it (one constructor per Event), and marks or unmarks it:
// the exclude-from-load-balancers label, node-drainer's own NoSchedule taint,
// the cordon and the out-of-service taint. What node-drainer itself changed,
// and the set of causes it holds the node for (a terminate hook, a spot
// warning, a rebalance recommendation, ...), are recorded in an annotation
// on the node: a mark goes only when no cause holds it any more, and a mark
// somebody else set is never removed.
package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

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
	// AnnotationOwned records, as JSON, what node-drainer changed on the node
	// and the causes it holds the node for (see Marks).
	AnnotationOwned = "node-drainer.io/changes"
)

// ErrNotFound means the instance has no node in this cluster.
var ErrNotFound = errors.New("node not found")

// PageSize is how many Nodes one list request asks for when the node of an
// instance must be looked for by providerID: the cluster's Nodes are read
// page by page and only the match is kept.
const PageSize = 250

// Find returns the node of an instance: by name (EKS names nodes after the
// private DNS name), else by spec.providerID (aws:///<az>/<instance-id>).
//
// Nodes have no field selector on spec.providerID: that search lists them
// page by page (PageSize a request, client-go's pager), keeping nothing but
// the match and stopping there. It is a consistent read (resourceVersion
// "", etcd's quorum or a cache proven as fresh), never the watch cache's
// "0": a node registered a moment ago must not be missed by a lagging
// cache, and ErrNotFound is final (rule 8).
func Find(ctx context.Context, c kubernetes.Interface, privateDNS, instanceID string) (*corev1.Node, error) {
	if privateDNS != "" {
		var n *corev1.Node
		err := cluster.Retry(ctx, func() (err error) {
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
	n, err := byProviderID(ctx, c, instanceID)
	if n != nil || err != nil {
		return n, err
	}
	return nil, fmt.Errorf("%w: no node named %q or with provider id of %s", ErrNotFound, privateDNS, instanceID)
}

// Get reads the node by name, once: a NotFound is the API's error (see
// apierrors.IsNotFound), for the caller to tell "gone" from "unreadable".
func Get(ctx context.Context, c kubernetes.Interface, name string) (*corev1.Node, error) {
	return c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// Delete deletes the node, only the one of that UID (a node registered
// again under its name is not touched); one already gone is no error. Other
// errors are the API's.
func Delete(ctx context.Context, c kubernetes.Interface, n *corev1.Node) error {
	err := c.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// byProviderID looks for the instance's node page by page (a consistent
// read) and returns it (nil: the cluster has none).
func byProviderID(ctx context.Context, c kubernetes.Interface, instanceID string) (*corev1.Node, error) {
	var found *corev1.Node
	err := cluster.RetryIf(ctx, cluster.RetriableList, func() error {
		found = nil
		return cluster.EachItem(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Nodes().List(ctx, o)
		}, PageSize, metav1.ListOptions{}, func(o runtime.Object) (bool, error) {
			if n := o.(*corev1.Node); ProviderInstanceID(n.Spec.ProviderID) == instanceID {
				found = n.DeepCopy() // not the page's: the page goes
				return true, nil
			}
			return false, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return found, nil
}

// LookAside is how often WaitReady, waiting on a name no node has, looks
// for the instance's node by providerID in case it registered under another
// name (a self-managed kubelet's --hostname-override).
var LookAside = 2 * time.Minute

// WaitReady waits until the instance's node (named privateDNS, or with the
// instance's providerID) is registered and Ready, or ctx ends; it returns the
// node last seen (nil: none yet) and, when not Ready, an error matching
// cluster.ErrWaitTimeout or the API's own (a 403 at once, never a timeout).
//
// It lists then watches the one node by metadata.name (a request and a
// watch whose size is the node's, not the cluster's): privateDNS, or the
// name of the node found by providerID. While no node of that name has been
// seen, it looks by providerID (Find's paged search) at the start when the
// name is not known, and every LookAside, so a node registered under
// another name is found too.
func WaitReady(ctx context.Context, c kubernetes.Interface, privateDNS, instanceID string) (*corev1.Node, error) {
	var (
		mu   sync.Mutex
		seen *corev1.Node
	)
	name := privateDNS
	clk := cluster.Clock(ctx)
	for {
		if name == "" {
			n, err := byProviderID(ctx, c, instanceID)
			switch {
			case err != nil && ctx.Err() != nil:
				return nil, fmt.Errorf("waiting for the node of %s to be Ready: %w: %w", instanceID, cluster.ErrWaitTimeout, context.Cause(ctx))
			case err != nil:
				return nil, fmt.Errorf("waiting for the node of %s to be Ready: %w", instanceID, err)
			case n != nil && Ready(n):
				return n, nil
			case n != nil:
				name = n.Name
			}
		}
		wctx, cancel := context.WithCancel(ctx)
		if name == "" || privateDNS != "" {
			// nobody of that name yet: look aside after a while
			go lookAside(wctx, cancel, clk, func() bool { mu.Lock(); defer mu.Unlock(); return seen == nil })
		}
		var err error
		if name != "" {
			err = untilReady(wctx, c, name, privateDNS, instanceID, &mu, &seen)
		} else {
			<-wctx.Done()
			err = cluster.ErrWaitTimeout
		}
		cancel()
		mu.Lock()
		last := seen
		mu.Unlock()
		switch {
		case err == nil:
			return last, nil
		case ctx.Err() != nil || !errors.Is(err, cluster.ErrWaitTimeout):
			return last, fmt.Errorf("waiting for the node of %s to be Ready: %w", instanceID, err)
		}
		// the look-aside window ended with no node of that name: by
		// providerID next
		if last == nil {
			name = ""
		}
	}
}

// lookAside ends a wait by name (cancel) after LookAside when no node of
// that name has been seen by then (unseen), so that WaitReady looks by
// providerID; it returns when ctx ends first.
func lookAside(ctx context.Context, cancel context.CancelFunc, clk clock.Clock, unseen func() bool) {
	select {
	case <-ctx.Done():
	case <-clk.After(LookAside):
		if unseen() {
			cancel()
		}
	}
}

// untilReady lists then watches the node named name until it is the
// instance's and Ready, or ctx ends; the node last seen is put in *seen.
func untilReady(ctx context.Context, c kubernetes.Interface, name, privateDNS, instanceID string, mu *sync.Mutex, seen **corev1.Node) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return c.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	return cluster.Until(ctx, lw, &corev1.Node{}, func(s cache.Store) (bool, error) {
		for _, o := range s.List() {
			n := o.(*corev1.Node)
			if matches(n, privateDNS, instanceID) {
				mu.Lock()
				*seen = n.DeepCopy()
				mu.Unlock()
				return Ready(n), nil
			}
		}
		return false, nil
	})
}

// matches says whether n is the instance's node, as Find decides it.
func matches(n *corev1.Node, privateDNS, instanceID string) bool {
	if privateDNS != "" && n.Name == privateDNS && (n.Spec.ProviderID == "" || ProviderInstanceID(n.Spec.ProviderID) == instanceID) {
		return true
	}
	return ProviderInstanceID(n.Spec.ProviderID) == instanceID
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
