// Package drain evicts a node's pods, honouring PodDisruptionBudgets, and
// waits until they are gone. Pod selection is kubectl's
// (k8s.io/kubectl/pkg/drain), built in exactly one constructor that sets
// every field. The pacing is node-drainer's own: one watch of the node's
// pods and one of the PDBs per drain; a pod a PDB holds is evicted when the
// PDB allows a disruption (not retried into 429s, not after a fixed sleep),
// and the pods go in tiers (RWO volumes first, critical pods last).
package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	kubectl "k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/clock"

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
	// OnPDBWait, if set, is told of each pod a PodDisruptionBudget held:
	// the PDBs that cover it, how long from when it was first held until it
	// was evicted (evicted true) or the drain gave up on it. Called
	// concurrently.
	OnPDBWait func(p Pod, pdbs string, waited time.Duration, evicted bool)
	// OnEvicted, if set, is told of each pod whose eviction the apiserver
	// accepted (not of one found gone). Called concurrently; it must not
	// block.
	OnEvicted func(p Pod)
	// CriticalPriority: pods at or above this priority (and those of the
	// system-node-critical and system-cluster-critical classes) are drained
	// last (0: DefaultCriticalPriority).
	CriticalPriority int32
	// GraceCap caps each evicted pod's grace period, and each tier's share of
	// the time left (0: no cap). A spot warning's drain must fit its notice.
	GraceCap time.Duration
	// Unordered evicts every pod at once, not tier by tier: a NotReady
	// node's pods never finish, so a tier would never end.
	Unordered bool
	// Turns, if set, orders this drain's evictions under the PDBs it shares
	// with the drains of other nodes (nil: the drain's jitter alone spaces
	// them).
	Turns Turns
	// OnPhase, if set, is told when each round of the drain reaches a
	// phase (PhasePlanned, PhaseWatching, PhaseGone), with a detail: where
	// a drain's time goes.
	OnPhase func(phase Phase, detail string)
	// AfterGone, if set, is called (it must not block) once a round's pods
	// are all gone, as the drain lists the node's pods again (rule 15):
	// what the caller reads after the drain (the node's volumes) is read
	// beside that re-read instead of after it. ctx is the drain's.
	AfterGone func(ctx context.Context)
	// Policy is what the drain does with the pods that ask not to be
	// disrupted (PolicyIgnore: nothing apart, and nothing more is read).
	Policy Policy
	// Deadline is when the drain must be over, if later than its
	// context's (a drain that later invocations carry on): a pod evicted
	// last (PolicyLast) goes its grace period before it (zero: the
	// context's deadline).
	Deadline time.Time
	// Clock is what the drain reads the time from and waits on: the pacing
	// of evictions, the PDBs' turns, each tier's share of the time left
	// (nil: the real clock). The drain's own end is its context's deadline,
	// which runs on the real clock.
	Clock clock.WithTicker
}

// Phase is a point a drain's round reaches (Options.OnPhase).
type Phase string

// The phases of a drain's round, in order.
const (
	PhasePlanned  Phase = "planned"   // the node's pods listed and filtered
	PhaseWatching Phase = "watching"  // the pods' and PDBs' watches listed
	PhaseGone     Phase = "pods-gone" // every eviction answered, the pods gone or given up
)

func (d *Drainer) phase(p Phase, format string, args ...any) {
	if d.opts.OnPhase != nil {
		d.opts.OnPhase(p, fmt.Sprintf(format, args...))
	}
}

// Turns orders the evictions of several drains under the PDBs they share
// (lease.Turns: by the order in which the drains took their leases).
type Turns interface {
	// Announce tells the other drains this drain's pods under the shared
	// PDBs (namespace/name → pod names), replacing what it told before.
	Announce(ctx context.Context, shared map[string][]string) error
	// Ahead counts the pods under pdb of the drains before this one that
	// are not done (done: the PDB's status showed their eviction); ok is
	// false when the other drains are not known.
	Ahead(pdb string, done func(pod string) bool) (n int, ok bool)
	// Changed is closed when what Ahead reads may have changed.
	Changed() <-chan struct{}
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
	// ErrRefused: admission (a ValidatingAdmissionPolicy, a webhook, or
	// RBAC) refused the eviction (400, 403 or 422) until the drain's
	// context ended. A refusal is not a verdict: it is retried with backoff
	// like a PDB's, never taken as "nothing left to do" (rule 13).
	ErrRefused = errors.New("eviction refused by admission")
)

// errGone: the pod went while its eviction waited (admit): nothing to evict.
var errGone = errors.New("pod gone before its eviction")

// refused reports an eviction refused by admission or authorization: a
// policy or webhook's 400, 403 or 422 (a terminating namespace's 403 is
// answered apart, by a delete).
func refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

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
	if opts.CriticalPriority == 0 {
		opts.CriticalPriority = DefaultCriticalPriority
	}
	if out == nil {
		out = io.Discard
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Drainer{client: client, opts: opts, out: out}
}

// helper is the one place a kubectl drain.Helper is built. Its zero values are
// traps (GracePeriodSeconds 0 deletes at once, Timeout 0 waits forever,
// EvictErrorRetryDelay 0 spins, nil writers panic), so every field is set.
func (d *Drainer) helper(ctx context.Context, client kubernetes.Interface) *kubectl.Helper {
	h := &kubectl.Helper{
		Ctx:                             ctx,
		Client:                          client,
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
	return d.plan(ctx, node, nil)
}

// plan is Plan; with into set, the read it made is kept there: the node's
// pods at one resourceVersion (every page of one consistent list), from
// which the drain's watch of them starts (none if no list was answered).
func (d *Drainer) plan(ctx context.Context, node string, into *corev1.PodList) (evict []corev1.Pod, warnings string, err error) {
	client := kubernetes.Interface(d.client)
	if into != nil {
		client = keepList{d.client, into}
	}
	var list *kubectl.PodDeleteList
	var errs []error
	// the listing's own error is the API's (retried when retriable); kubectl's
	// filters report a failed lookup (the DaemonSet of a pod, say) as a
	// message, not as the API error: with this Helper's settings no filter
	// refuses a pod for good, so their errors are retried until ctx ends
	_ = cluster.RetryIf(ctx, func(err error) bool { return list != nil || cluster.Retriable(err) }, func() error {
		list, errs = d.helper(ctx, client).GetPodsForDeletion(node)
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

// Drain evicts the pods of node, tier by tier (see Tiers): the pods of a
// tier concurrently, the next tier once each pod of this one is gone,
// blocked by a PodDisruptionBudget, or failed. A pod a PDB holds is evicted
// when the PDB allows a disruption again (one PDB watch per drain serves all
// pods), and retried while the PDB refuses, until ctx ends. It never deletes
// a pod: a PDB is never violated. Done means read again (rule 15): once every
// planned pod is gone, the node's pods are listed again, and a pod bound
// since the plan (a binding in flight at the cordon, a pod created with
// spec.nodeName) is drained too, until a listing finds none new. The error
// is about the drain itself (listing failed); pods that could not be
// evicted in time are in Result.Remaining.
func (d *Drainer) Drain(ctx context.Context, node string) (Result, error) {
	read := &corev1.PodList{}
	pods, warnings, err := d.plan(ctx, node, read)
	res := Result{Warnings: warnings}
	seen := sets.New[types.UID]()
	for round := 1; ; round++ {
		res.Claims = mergeClaims(res.Claims, claimsOf(pods))
		if err != nil || len(pods) == 0 {
			return res, err
		}
		if round > 1 {
			cluster.Logger(ctx).InfoContext(ctx, "pods bound to the node since the drain planned: draining them too", "node", node, "pods", len(pods), "round", round)
		}
		for _, p := range pods {
			seen.Insert(p.UID)
		}
		r := d.drainPods(ctx, node, pods, read)
		res.Evicted = append(res.Evicted, r.Evicted...)
		res.Remaining = append(res.Remaining, r.Remaining...)
		if !r.Done() || d.opts.DryRun || ctx.Err() != nil {
			return res, nil
		}
		if d.opts.AfterGone != nil {
			d.opts.AfterGone(ctx)
		}
		read = &corev1.PodList{}
		var again []corev1.Pod
		again, _, err = d.plan(ctx, node, read)
		pods = slices.DeleteFunc(again, func(p corev1.Pod) bool { return seen.Has(p.UID) })
	}
}

// mergeClaims adds the claims of more to have, sorted, once each.
func mergeClaims(have, more []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(append(have, more...))))
}

// stillThere reads the pod afresh (a list by name: the drainer's role lists
// pods, it does not get them) and reports whether the pod p names, its UID,
// is still there.
func (d *Drainer) stillThere(ctx context.Context, p corev1.Pod) (bool, error) {
	l, err := d.client.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + p.Name})
	if err != nil {
		return false, err
	}
	for _, q := range l.Items {
		if q.Name == p.Name && q.UID == p.UID {
			return true, nil
		}
	}
	return false, nil
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

// deleteOptions are the options of every eviction and delete: the pod's own
// grace period (or the configured one), capped at limit when it is not 0,
// and its UID as a precondition, so a pod that reuses the name (a
// StatefulSet's replacement) is never touched.
func (d *Drainer) deleteOptions(p corev1.Pod, limit time.Duration) metav1.DeleteOptions {
	o := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}
	g := int64(-1)
	if d.opts.GracePeriodSeconds >= 0 {
		g = int64(d.opts.GracePeriodSeconds)
	}
	if limit > 0 {
		own := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if p.Spec.TerminationGracePeriodSeconds != nil {
			own = *p.Spec.TerminationGracePeriodSeconds
		}
		if g < 0 {
			g = own
		}
		if c := int64(limit / time.Second); g > c {
			g = c
		}
	}
	if g >= 0 {
		o.GracePeriodSeconds = &g
	}
	return o
}

// evictPod asks the eviction API (policy/v1) to evict the pod it names by
// UID. kubectl's Helper.EvictPod sends no precondition, so it is not used.
func (d *Drainer) evictPod(ctx context.Context, p corev1.Pod, grace time.Duration) error {
	o := d.deleteOptions(p, grace)
	return d.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &o,
	})
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
