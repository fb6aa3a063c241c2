// Package drain evicts a node's pods, honouring PodDisruptionBudgets, and
// waits until they are gone. Pod selection and the eviction call are
// kubectl's (k8s.io/kubectl/pkg/drain), built in exactly one constructor that
// sets every field; the retry loop around a 429 is node-drainer's own, so a
// pod held by a PDB is evicted again as soon as the PDB allows it (a watch on
// the namespace's PDBs), not after a fixed sleep.
package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	kubectl "k8s.io/kubectl/pkg/drain"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// Options tune a drain.
type Options struct {
	// GracePeriodSeconds for evicted pods; -1 keeps each pod's own.
	GracePeriodSeconds int
	// EvictUnmanaged also evicts pods no controller owns (they are not recreated).
	EvictUnmanaged bool
	// RetryCap is the longest wait between two evictions of a pod that a PDB
	// holds, should the PDB's watch say nothing (default 2 s).
	RetryCap time.Duration
	// DryRun lists what would be evicted and evicts nothing.
	DryRun bool
}

// Errors a remaining pod's Err matches with errors.Is, so that callers tell
// a PDB from a timeout; the API's own errors stay wrapped (a 403 is
// apierrors.IsForbidden).
var (
	// ErrBlockedByPDB: a PodDisruptionBudget refused the eviction until the
	// drain's context ended.
	ErrBlockedByPDB = errors.New("blocked by PodDisruptionBudget")
	// ErrTimeout: the drain's context ended before the pod was gone (its
	// eviction still retried, or the pod evicted and still terminating).
	ErrTimeout = errors.New("drain timed out")
)

// timedOut marks err as caused by the drain's context ending: it matches
// ErrTimeout, and its text is err's.
type timedOut struct{ error }

func (timedOut) Is(target error) bool { return target == ErrTimeout }
func (e timedOut) Unwrap() error      { return e.error }

// Pod names one pod and why it is reported.
type Pod struct {
	Namespace, Name string
	UID             types.UID `json:"-"`
	Reason          string    `json:"reason,omitempty"`
	// Err is why a remaining pod is still there (nil in a dry run): it
	// matches ErrBlockedByPDB, ErrTimeout, or wraps the API's error.
	Err error `json:"-"`
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Result tells what a drain did.
type Result struct {
	Evicted   []Pod // eviction accepted and the pod is gone
	Remaining []Pod // still on the node, with the reason (PDB, error, deadline)
	// Warnings is kubectl's summary of pods left in place by design
	// (DaemonSet pods, unmanaged pods when not evicted); mirror pods are
	// skipped silently.
	Warnings string
	// Claims are the PersistentVolumeClaims (namespace/name) the evicted pods used.
	Claims []string
}

// Done reports whether nothing remains on the node.
func (r Result) Done() bool { return len(r.Remaining) == 0 }

// Drainer drains nodes with one client.
type Drainer struct {
	client kubernetes.Interface
	opts   Options
	out    io.Writer
}

// New returns a Drainer; out receives kubectl's warnings (never nil).
func New(client kubernetes.Interface, opts Options, out io.Writer) *Drainer {
	if opts.RetryCap <= 0 {
		opts.RetryCap = 2 * time.Second
	}
	if out == nil {
		out = io.Discard
	}
	return &Drainer{client: client, opts: opts, out: out}
}

// helper is the one place a kubectl drain.Helper is built. Its zero values are
// traps (GracePeriodSeconds 0 deletes at once, Timeout 0 waits forever,
// EvictErrorRetryDelay 0 spins, nil writers panic), so every field is set.
func (d *Drainer) helper(ctx context.Context) *kubectl.Helper {
	h := &kubectl.Helper{
		Ctx:                             ctx,
		Client:                          d.client,
		Force:                           true, // unmanaged pods: decided by our own filter below
		GracePeriodSeconds:              d.opts.GracePeriodSeconds,
		IgnoreAllDaemonSets:             true,
		Timeout:                         time.Minute, // unused: we wait ourselves
		DeleteEmptyDirData:              true,        // the node is going away with its disks
		Selector:                        "",
		PodSelector:                     "",
		ChunkSize:                       500,
		DisableEviction:                 false,
		SkipWaitForDeleteTimeoutSeconds: 0,
		EvictErrorRetryDelay:            d.opts.RetryCap,
		Out:                             d.out,
		ErrOut:                          d.out,
		DryRunStrategy:                  0, // none: dry-run is ours, nothing is sent
		OnPodDeletedOrEvicted:           func(*corev1.Pod, bool) {},
		OnPodDeletionOrEvictionStarted:  func(*corev1.Pod, bool) {},
		OnPodDeletionOrEvictionFinished: func(*corev1.Pod, bool, error) {},
	}
	if !d.opts.EvictUnmanaged {
		h.AdditionalFilters = []kubectl.PodFilter{skipUnmanaged}
	}
	return h
}

func skipUnmanaged(p corev1.Pod) kubectl.PodDeleteStatus {
	if metav1.GetControllerOf(&p) == nil {
		return kubectl.MakePodDeleteStatusWithWarning(false, "unmanaged pod left in place (EVICT_UNMANAGED_PODS=false)")
	}
	return kubectl.MakePodDeleteStatusOkay()
}

// Plan lists the pods a drain of node would evict, and those it would skip.
func (d *Drainer) Plan(ctx context.Context, node string) (evict []corev1.Pod, warnings string, err error) {
	var list *kubectl.PodDeleteList
	var errs []error
	// the listing's own error is the API's (retried when retriable); kubectl's
	// filters report a failed lookup (the DaemonSet of a pod, say) as a
	// message, not as the API error: with this Helper's settings no filter
	// refuses a pod for good, so their errors are retried until ctx ends
	_ = cluster.RetryIf(ctx, func(err error) bool { return list != nil || cluster.Retriable(err) }, func() error {
		list, errs = d.helper(ctx).GetPodsForDeletion(node)
		return errors.Join(errs...)
	})
	if list == nil {
		return nil, "", fmt.Errorf("listing pods of node %s: %w", node, errors.Join(errs...))
	}
	evict = list.Pods()
	if len(errs) > 0 {
		return evict, list.Warnings(), fmt.Errorf("pods of node %s cannot be drained: %w", node, errors.Join(errs...))
	}
	return evict, list.Warnings(), nil
}

// Drain evicts the pods of node concurrently, each retried while a PDB holds
// it, until all are gone or ctx ends. It never deletes a pod: a PDB is never
// violated. The error is about the drain itself (listing failed); pods that
// could not be evicted in time are in Result.Remaining.
func (d *Drainer) Drain(ctx context.Context, node string) (Result, error) {
	pods, warnings, err := d.Plan(ctx, node)
	res := Result{Warnings: warnings, Claims: claimsOf(pods)}
	if err != nil {
		return res, err
	}
	if d.opts.DryRun {
		for _, p := range pods {
			res.Remaining = append(res.Remaining, Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Reason: "dry run: would evict"})
		}
		return res, nil
	}
	// the node's pods are watched from the start, so that pods that go
	// while others are still refused are seen gone even if ctx ends first
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	type watched struct {
		gone map[types.UID]bool
		err  error
	}
	goneC := make(chan watched, 1)
	go func() {
		g, err := d.waitGone(wctx, node, pods)
		goneC <- watched{g, err}
	}()
	var (
		mu      sync.Mutex
		reasons = map[types.UID]error{}
		wg      sync.WaitGroup
	)
	for _, p := range pods {
		wg.Go(func() {
			if err := d.evict(ctx, p); err != nil {
				mu.Lock()
				reasons[p.UID] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(reasons) == len(pods) {
		stopWatch() // no eviction was accepted: nothing to wait for
	}
	w := <-goneC
	gone, werr := w.gone, w.err
	for _, p := range pods {
		pp := Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
		if gone[p.UID] {
			res.Evicted = append(res.Evicted, pp)
			continue
		}
		pp.Err = reasons[p.UID]
		switch {
		case pp.Err != nil:
		case werr != nil:
			pp.Err = fmt.Errorf("evicted, not watched to the end: %w", werr)
		default:
			pp.Err = timedOut{errors.New("evicted, still terminating")}
		}
		pp.Reason = pp.Err.Error()
		res.Remaining = append(res.Remaining, pp)
	}
	return res, nil
}

// evict evicts one pod, retrying while a PDB refuses (429) or the apiserver
// has a transient failure, until ctx ends. A PDB's refusal at the end is
// ErrBlockedByPDB, a transient failure ErrTimeout; any other error is the
// API's, wrapped.
func (d *Drainer) evict(ctx context.Context, p corev1.Pod) error {
	backoff := wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: d.opts.RetryCap}
	var blockers string // the PDBs named in the log, once
	for {
		err := d.evictPod(ctx, p)
		if blockers == "" && (apierrors.IsTooManyRequests(err) || isMultiplePDBs(err)) {
			blockers = d.blockers(ctx, p)
			cluster.Logger(ctx).InfoContext(ctx, "eviction refused by PodDisruptionBudget", "pod", p.Namespace+"/"+p.Name,
				"pdbs", blockers, "message", pdbMessage(err))
		}
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			// the UID precondition failed: the pod we meant is gone, and one
			// of the same name (a StatefulSet's replacement) is not ours
			return nil
		case apierrors.IsTooManyRequests(err):
			// a PDB holds it: wait until the PDBs covering it allow a
			// disruption; when none is known to block (its status is ahead of
			// the refusal, or its selector is not the pod's), pace the retry
			watched, werr := d.waitPDBAllows(ctx, p, d.opts.RetryCap)
			if werr != nil {
				return fmt.Errorf("%w: %s", ErrBlockedByPDB, pdbMessage(err))
			}
			if !watched {
				select {
				case <-ctx.Done():
					return fmt.Errorf("%w: %s", ErrBlockedByPDB, pdbMessage(err))
				case <-time.After(backoff.Step()):
				}
			}
		case apierrors.IsForbidden(err) && isNamespaceTerminating(err):
			// what kubectl does: eviction is refused in a terminating
			// namespace; the delete names the pod's UID as the eviction did
			return d.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, d.deleteOptions(p))
		case isMultiplePDBs(err):
			// the eviction API refuses a pod under two PDBs (a 500): only an
			// operator can mend it; the retry is paced and the PDBs named
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (%s): %s", ErrBlockedByPDB, blockers, pdbMessage(err))
			case <-time.After(backoff.Step()):
			}
		case cluster.Retriable(err):
			select {
			case <-ctx.Done():
				return timedOut{fmt.Errorf("evicting: %w", err)}
			case <-time.After(backoff.Step()):
			}
		default:
			return fmt.Errorf("evicting: %w", err)
		}
		if ctx.Err() != nil {
			// ctx ended between two tries: the last refusal says why
			switch {
			case apierrors.IsTooManyRequests(err):
				return fmt.Errorf("%w: %s", ErrBlockedByPDB, pdbMessage(err))
			case isMultiplePDBs(err):
				return fmt.Errorf("%w (%s): %s", ErrBlockedByPDB, blockers, pdbMessage(err))
			}
			return timedOut{fmt.Errorf("evicting: %w", ctx.Err())}
		}
	}
}

// isMultiplePDBs reports the eviction API's refusal of a pod that more than
// one PodDisruptionBudget covers.
func isMultiplePDBs(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "more than one PodDisruptionBudget")
}

// covers reports whether the PDB selects the pod. In policy/v1 an empty
// selector matches every pod of the namespace (a nil one none):
// LabelSelectorAsSelector says so.
func covers(pdb policyv1.PodDisruptionBudget, p corev1.Pod) bool {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	return err == nil && sel.Matches(labels.Set(p.Labels))
}

// blockers names the PDBs that cover the pod (namespace/name, comma
// separated), for the log; "unknown" when they cannot be listed.
func (d *Drainer) blockers(ctx context.Context, p corev1.Pod) string {
	list, err := d.client.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "unknown"
	}
	var names []string
	for _, pdb := range list.Items {
		if covers(pdb, p) {
			names = append(names, fmt.Sprintf("%s/%s (disruptions allowed %d)", pdb.Namespace, pdb.Name, pdb.Status.DisruptionsAllowed))
		}
	}
	if len(names) == 0 {
		return "none matching"
	}
	return strings.Join(names, ", ")
}

// deleteOptions are the options of every eviction and delete: the pod's own
// grace period (or the configured one) and its UID as a precondition, so a
// pod that reuses the name (a StatefulSet's replacement) is never touched.
func (d *Drainer) deleteOptions(p corev1.Pod) metav1.DeleteOptions {
	o := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}
	if d.opts.GracePeriodSeconds >= 0 {
		g := int64(d.opts.GracePeriodSeconds)
		o.GracePeriodSeconds = &g
	}
	return o
}

// evictPod asks the eviction API (policy/v1) to evict the pod it names by
// UID. kubectl's Helper.EvictPod sends no precondition, so it is not used.
func (d *Drainer) evictPod(ctx context.Context, p corev1.Pod) error {
	o := d.deleteOptions(p)
	return d.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &o,
	})
}

// waitPDBAllows waits until every PDB covering the pod reports a disruption
// allowed (a watch on the namespace's PDBs, from the list's version), or
// limit passes; then the eviction is simply tried again. It reports whether
// it waited on a PDB it knows blocks the pod, and fails only when ctx ends.
func (d *Drainer) waitPDBAllows(ctx context.Context, p corev1.Pod, limit time.Duration) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	list, err := d.client.PolicyV1().PodDisruptionBudgets(p.Namespace).List(wctx, metav1.ListOptions{})
	if err != nil {
		<-wctx.Done()
		return true, ctx.Err()
	}
	allowed := map[string]bool{} // the pod's PDBs, and whether each allows a disruption now
	for _, pdb := range list.Items {
		if covers(pdb, p) {
			allowed[pdb.Name] = pdb.Status.DisruptionsAllowed > 0
		}
	}
	all := func() bool {
		for _, ok := range allowed {
			if !ok {
				return false
			}
		}
		return true
	}
	if len(allowed) == 0 || all() {
		return false, ctx.Err() // the caller paces the retry
	}
	w, err := d.client.PolicyV1().PodDisruptionBudgets(p.Namespace).Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		<-wctx.Done()
		return true, ctx.Err()
	}
	defer w.Stop()
	for {
		select {
		case <-wctx.Done(): // the limit: the eviction is tried again
			return true, ctx.Err()
		case ev, open := <-w.ResultChan():
			if !open {
				return true, ctx.Err()
			}
			pdb, ok := ev.Object.(*policyv1.PodDisruptionBudget)
			if !ok {
				continue
			}
			if _, ours := allowed[pdb.Name]; ours {
				allowed[pdb.Name] = pdb.Status.DisruptionsAllowed > 0
				if all() {
					return true, ctx.Err()
				}
			}
		}
	}
}

// waitGone waits until every one of pods is gone from the node (deleted, or
// replaced by a pod of the same name with another UID) or ctx ends: it lists
// the node's pods, then watches them from the list's version. It reports the
// pods gone, and, when the watch itself failed for good (a 403), why.
func (d *Drainer) waitGone(ctx context.Context, node string, pods []corev1.Pod) (map[types.UID]bool, error) {
	gone := map[types.UID]bool{}
	if len(pods) == 0 {
		return gone, nil
	}
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return d.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return d.client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	var mu sync.Mutex
	err := cluster.Until(ctx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) {
		present := map[types.UID]bool{}
		for _, o := range s.List() {
			present[o.(*corev1.Pod).UID] = true
		}
		mu.Lock()
		defer mu.Unlock()
		all := true
		for _, p := range pods {
			if present[p.UID] {
				all = false
			} else {
				gone[p.UID] = true
			}
		}
		return all, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil && !errors.Is(err, cluster.ErrWaitTimeout) {
		return gone, fmt.Errorf("watching pods of node %s: %w", node, err)
	}
	return gone, nil
}

// claimsOf returns the PVCs (namespace/name) the pods mount, including
// generic ephemeral volumes' claims (<pod>-<volume>).
func claimsOf(pods []corev1.Pod) []string {
	set := map[string]bool{}
	for _, p := range pods {
		for _, v := range p.Spec.Volumes {
			switch {
			case v.PersistentVolumeClaim != nil:
				set[p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName] = true
			case v.Ephemeral != nil:
				set[p.Namespace+"/"+p.Name+"-"+v.Name] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// pdbMessage is the refusal's message with the cause that names the
// blocking budget ("The disruption budget web needs 3 healthy pods ...").
func pdbMessage(err error) string {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return err.Error()
	}
	msg := st.Status().Message
	if c, ok := apierrors.StatusCause(err, policyv1.DisruptionBudgetCause); ok && c.Message != "" {
		msg += " (" + c.Message + ")"
	}
	return msg
}

func isNamespaceTerminating(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Type == corev1.NamespaceTerminatingCause {
			return true
		}
	}
	return false
}
