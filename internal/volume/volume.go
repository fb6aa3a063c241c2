// Package volume releases a node's ReadWriteOnce volumes. On the graceful
// path it waits until the VolumeAttachments of the drained pods' volumes are
// deleted (the CSI driver detached them, so the next node attaches at once);
// on the abrupt path, for a node EC2 confirms down, it force-deletes the pods
// still bound to the node and deletes its VolumeAttachments, without waiting
// for the controller-manager's six-minute timeout.
package volume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// ErrTimeout means WaitDetached's context ended with volume attachments
// still on the node (or before they could be read). Any other error from
// WaitDetached is the API's, wrapped (a 403 is apierrors.IsForbidden).
var ErrTimeout = errors.New("timed out waiting for volume attachments to be deleted")

// PersistentVolumes maps claims (namespace/name) to their bound PVs' names;
// unbound or missing claims are left out.
func PersistentVolumes(ctx context.Context, c kubernetes.Interface, claims []string) ([]string, error) {
	var pvs []string
	var errs []error
	for _, claim := range claims {
		ns, name, ok := strings.Cut(claim, "/")
		if !ok {
			continue
		}
		var pvc *corev1.PersistentVolumeClaim
		err := cluster.Retry(ctx, func() (err error) {
			pvc, err = c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("getting claim %s: %w", claim, err))
			continue
		}
		if pvc.Spec.VolumeName != "" {
			pvs = append(pvs, pvc.Spec.VolumeName)
		}
	}
	return pvs, errors.Join(errs...)
}

// PageSize is how many VolumeAttachments one list request asks for: the
// cluster's attachments are read page by page, and only the node's kept.
const PageSize = 500

// nodeSelector is whether the apiserver serves a spec.nodeName field
// selector on VolumeAttachments: 0 not known yet, 1 it does, -1 it does not
// (Kubernetes 1.35 has none: such a list answers 400, "spec.nodeName" is
// not a known field selector). It is learnt from the first list of a process (a process
// serves one cluster).
var nodeSelector atomic.Int32

// ForgetSelectorSupport forgets what the apiserver said about the
// spec.nodeName field selector (tests that change apiservers).
func ForgetSelectorSupport() { nodeSelector.Store(0) }

func nodeField(node string) string {
	return fields.OneTermEqualSelector("spec.nodeName", node).String()
}

// unsupportedSelector is the apiserver's refusal of a field selector it
// does not know: a 400 saying `"spec.nodeName" is not a known field
// selector` (Kubernetes 1.35), or "field label not supported" (older).
func unsupportedSelector(err error) bool {
	msg := err.Error()
	return apierrors.IsBadRequest(err) && (strings.Contains(msg, "not a known field selector") || strings.Contains(msg, "field label not supported"))
}

func onNode(va *storagev1.VolumeAttachment, node string) bool { return va.Spec.NodeName == node }

// listOnNode lists the node's VolumeAttachments, as a consistent read (not
// the watch cache's "0", which may lag): by the spec.nodeName field
// selector where the apiserver has one, else every attachment page by page
// (client-go's pager, PageSize a page), keeping only the node's. The list's
// resourceVersion is the first page's: the pages are one snapshot, so a
// watch can start from it. Items are filtered here in either case.
func listOnNode(ctx context.Context, c kubernetes.Interface, node string) (*storagev1.VolumeAttachmentList, error) {
	out := &storagev1.VolumeAttachmentList{}
	read := func(sel string) error {
		out.Items, out.ResourceVersion = nil, ""
		p := cluster.Pager(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := c.StorageV1().VolumeAttachments().List(ctx, o)
			if err == nil && out.ResourceVersion == "" {
				out.ResourceVersion = l.ResourceVersion
			}
			return l, err
		}, PageSize)
		return p.EachListItem(ctx, metav1.ListOptions{FieldSelector: sel}, func(obj runtime.Object) error {
			if va, ok := obj.(*storagev1.VolumeAttachment); ok && onNode(va, node) {
				out.Items = append(out.Items, *va)
			}
			return nil
		})
	}
	if nodeSelector.Load() >= 0 {
		err := read(nodeField(node))
		if err == nil {
			nodeSelector.CompareAndSwap(0, 1)
			return out, nil
		}
		if !unsupportedSelector(err) {
			return nil, err
		}
		nodeSelector.Store(-1)
	}
	if err := read(""); err != nil {
		return nil, err
	}
	return out, nil
}

// Attachments lists the VolumeAttachments on node; with pvs non-empty, only
// those of these PersistentVolumes. Its cost is the node's where the
// apiserver can select attachments by node, else one request per PageSize
// attachments of the cluster, of which only the node's are kept.
func Attachments(ctx context.Context, c kubernetes.Interface, node string, pvs []string) ([]storagev1.VolumeAttachment, error) {
	var list *storagev1.VolumeAttachmentList
	err := cluster.RetryIf(ctx, cluster.RetriableList, func() (err error) {
		list, err = listOnNode(ctx, c, node)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing volume attachments: %w", err)
	}
	want := map[string]bool{}
	for _, pv := range pvs {
		want[pv] = true
	}
	var out []storagev1.VolumeAttachment
	for _, va := range list.Items {
		if len(pvs) > 0 && (va.Spec.Source.PersistentVolumeName == nil || !want[*va.Spec.Source.PersistentVolumeName]) {
			continue
		}
		out = append(out, va)
	}
	return out, nil
}

// WaitDetached waits until node has no VolumeAttachment left for pvs (none
// given: returns at once) or ctx ends; it returns those still there. It
// lists the node's VolumeAttachments (listOnNode), then watches them from
// the list's version: by the spec.nodeName field selector where the
// apiserver has one, else one watch of all attachments whose events of
// other nodes are dropped as they come (watch.Filter), so that the store
// holds the node's only. When ctx ends first the error matches ErrTimeout;
// a list or watch the apiserver refuses for good (403, 404) ends the wait
// at once and is returned wrapped.
func WaitDetached(ctx context.Context, c kubernetes.Interface, node string, pvs []string) ([]string, error) {
	if len(pvs) == 0 {
		return nil, nil
	}
	want := map[string]bool{}
	for _, pv := range pvs {
		want[pv] = true
	}
	var (
		mu   sync.Mutex
		left = pvs // until read: none is known to be detached
	)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			return listOnNode(ctx, c, node)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if nodeSelector.Load() > 0 {
				o.FieldSelector = nodeField(node)
			}
			w, err := c.StorageV1().VolumeAttachments().Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				va, ok := e.Object.(*storagev1.VolumeAttachment)
				return e, !ok || onNode(va, node) // bookmarks and errors pass
			}), nil
		},
	}
	err := cluster.Until(ctx, lw, &storagev1.VolumeAttachment{}, func(s cache.Store) (bool, error) {
		var vas []storagev1.VolumeAttachment
		for _, o := range s.List() {
			va := o.(*storagev1.VolumeAttachment)
			if onNode(va, node) && va.Spec.Source.PersistentVolumeName != nil && want[*va.Spec.Source.PersistentVolumeName] {
				vas = append(vas, *va)
			}
		}
		sort.Slice(vas, func(i, j int) bool { return vas[i].Name < vas[j].Name })
		mu.Lock()
		left = describe(vas)
		mu.Unlock()
		return len(vas) == 0, nil
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case err == nil:
		return nil, nil
	case !errors.Is(err, cluster.ErrWaitTimeout):
		return left, fmt.Errorf("waiting for volume attachments on node %s: %w", node, err)
	}
	return left, fmt.Errorf("%w: still on node %s: %s", ErrTimeout, node, strings.Join(left, ", "))
}

// Release is what ForceRelease did (or, dry-run, would do).
type Release struct {
	PodsDeleted        []string // namespace/name
	AttachmentsDeleted []string // name (pv)
}

// ForceRelease force-deletes (grace 0) every pod bound to node and deletes
// its VolumeAttachments. Only call it for a node whose instance EC2 confirms
// is not running: a volume detached from a live machine can be corrupted.
//
// guard, when not nil, is asked before the pods are deleted and again before
// the attachments are: its error (the evidence read again no longer shows the
// machine down) stops the release there and is returned. Each guard runs
// beside the read of what its step deletes (the pods, the attachments):
// both are done before anything is deleted, so the step waits for the slower
// of the two instead of the sum. Its answer holds for GuardFresh: a delete
// tried later (a retry, a delete behind a slow read) asks it again first
// (Verdict.Fresh). The pods are deleted side by side (ForceDeleteAtOnce at
// a time), each on its own evidence (rule 9).
func ForceRelease(ctx context.Context, c kubernetes.Interface, node string, dryRun bool, guard *Verdict) (Release, error) {
	if guard == nil {
		guard = NewVerdict(nil)
	}
	var rel Release
	var pods *corev1.PodList
	guardErr, err := beside(ctx, guard.Check, func() error {
		return cluster.Retry(ctx, func() (err error) {
			pods, err = c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
			})
			return err
		})
	})
	if guardErr != nil {
		return rel, guardErr
	}
	if err != nil {
		return rel, fmt.Errorf("listing pods of node %s: %w", node, err)
	}
	var errs []error
	rel.PodsDeleted, errs = forceDeletePods(ctx, c, pods.Items, dryRun, guard)
	var vas []storagev1.VolumeAttachment
	guardErr, err = beside(ctx, guard.Check, func() (err error) {
		vas, err = Attachments(ctx, c, node, nil)
		return err
	})
	if guardErr != nil {
		return rel, guardErr
	}
	if err != nil {
		return rel, errors.Join(append(errs, err)...)
	}
	for _, va := range vas {
		if !dryRun {
			err := cluster.RetryPinned(ctx, func() error {
				if err := guard.Fresh(ctx); err != nil {
					return err
				}
				return c.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{
					Preconditions: &metav1.Preconditions{UID: &va.UID},
				})
			})
			if no := guard.objection(); no != nil {
				return rel, errors.Join(append(errs, no)...) // the guard objects now: nothing more is deleted
			}
			if apierrors.IsConflict(err) {
				continue // the name is another attachment's now: not the one read, not deleted
			}
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting volume attachment %s: %w", va.Name, err))
				continue
			}
		}
		rel.AttachmentsDeleted = append(rel.AttachmentsDeleted, describe([]storagev1.VolumeAttachment{va})...)
	}
	sort.Strings(rel.PodsDeleted)
	return rel, errors.Join(errs...)
}

// forceDeletePods force-deletes pods but the mirror pods, ForceDeleteAtOnce
// at a time, each on its own evidence (guard): the names it deleted (or,
// dry-run, would delete), namespace/name, and each pod's error.
func forceDeletePods(ctx context.Context, c kubernetes.Interface, pods []corev1.Pod, dryRun bool, guard *Verdict) ([]string, []error) {
	deleted := make([]bool, len(pods))
	errs := make([]error, len(pods))
	var g errgroup.Group
	g.SetLimit(ForceDeleteAtOnce)
	for i, p := range pods {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue // the kubelet owns it; it goes with the node
		}
		if dryRun {
			deleted[i] = true
			continue
		}
		g.Go(func() error {
			// false: the name is another pod's now, not ours to delete
			deleted[i], errs[i] = forceDelete(ctx, c, p, guard)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("force-deleting pod %s/%s: %w", p.Namespace, p.Name, errs[i])
			}
			return nil
		})
	}
	_ = g.Wait() // each pod's error is kept in errs
	var names []string
	for i, p := range pods {
		if deleted[i] {
			names = append(names, p.Namespace+"/"+p.Name)
		}
	}
	return names, slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}

// ForceDeleteAtOnce is how many of a dead node's pods ForceRelease deletes
// at the same time.
const ForceDeleteAtOnce = 8

// beside runs guard and read at once and returns the errors of both, once
// both are done. A caller acts on what was read only if neither failed.
func beside(ctx context.Context, guard func(context.Context) error, read func() error) (guardErr, readErr error) {
	var g sync.WaitGroup
	g.Go(func() { guardErr = guard(ctx) })
	readErr = read()
	g.Wait()
	return guardErr, readErr
}

// forceDelete deletes the pod with grace 0, naming its UID and the
// resourceVersion read (safety rule 9: what is deleted is what was looked
// at). On a conflict the node's pods are read again: the same pod (UID),
// still bound, is deleted at its new version; otherwise it is gone or the
// name belongs to a replacement, and nothing is deleted. Each attempt is
// made on a fresh verdict of the guard (rule 11).
func forceDelete(ctx context.Context, c kubernetes.Interface, p corev1.Pod, guard *Verdict) (bool, error) {
	zero := int64(0)
	for range 5 {
		// pinned: a conflict must reach the re-read below, not repeat the
		// same stale delete until the deadline
		err := cluster.RetryPinned(ctx, func() error {
			if err := guard.Fresh(ctx); err != nil {
				return err
			}
			return c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero,
				Preconditions:      &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion},
			})
		})
		switch {
		case err == nil, apierrors.IsNotFound(err): // gone already: released all the same
			return true, nil
		case !apierrors.IsConflict(err):
			return false, err
		}
		var list *corev1.PodList
		if err := cluster.Retry(ctx, func() (err error) {
			list, err = c.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("metadata.name", p.Name),
					fields.OneTermEqualSelector("spec.nodeName", p.Spec.NodeName)).String(),
			})
			return err
		}); err != nil {
			return false, err
		}
		i := slices.IndexFunc(list.Items, func(q corev1.Pod) bool { return q.UID == p.UID })
		if i < 0 {
			return false, nil
		}
		p = list.Items[i]
	}
	return false, fmt.Errorf("pod %s/%s kept changing under the delete", p.Namespace, p.Name)
}

func describe(vas []storagev1.VolumeAttachment) []string {
	out := make([]string, 0, len(vas))
	for _, va := range vas {
		pv := "inline"
		if va.Spec.Source.PersistentVolumeName != nil {
			pv = *va.Spec.Source.PersistentVolumeName
		}
		out = append(out, fmt.Sprintf("%s (pv %s)", va.Name, pv))
	}
	return out
}

// DeleteAttachment deletes the VolumeAttachment, only the one of that UID;
// one already gone is no error. The caller has read again that it may (an
// attachment to a node the cluster no longer has, whose instance EC2
// reports down).
func DeleteAttachment(ctx context.Context, c kubernetes.Interface, va *storagev1.VolumeAttachment) error {
	err := c.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &va.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting volume attachment %s: %w", va.Name, err)
	}
	return nil
}
