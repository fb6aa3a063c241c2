package drain

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// podState is where a pod's eviction stands.
type podState int

const (
	statePending  podState = iota // its tier has not started
	stateStarted                  // being evicted
	stateBlocked                  // a PDB holds it (waiting, or refused)
	stateAccepted                 // eviction accepted: going
	stateFailed                   // given up (error, or ctx ended)
)

// pdbSyncWait bounds the wait for the PDBs' first list before evicting:
// evictions are tried without knowing the PDBs rather than not at all.
const pdbSyncWait = 5 * time.Second

// maxPDBNamespaces is the most namespaces a drain watches the PDBs of one by
// one (a list and a watch each); pods of more namespaces than that are
// served by one watch of every namespace's PDBs.
const maxPDBNamespaces = 16

// run is one drain's shared view: the node's pods and the PDBs that may
// cover them (one watch each), and where each pod's eviction stands.
type run struct {
	ctx        context.Context // the drain's: its watches end with it
	pods, pdbs *cluster.Informer
	cancel     context.CancelFunc
	turns      Turns // nil: none
	clock      clock.WithTicker
	want       []corev1.Pod
	mine       map[string]bool // want's namespace/name

	mu     sync.Mutex
	state  map[types.UID]podState
	reason map[types.UID]error
	// taken: per PDB (namespace/name), the pods this drain sent an eviction
	// for that its status may not count yet, with when it was admitted
	taken map[string]map[string]time.Time
	// inflight: the PDBs (namespace/name) an eviction of this drain is being
	// sent against; see take
	inflight map[string]bool
	// jitter: when each pod gated by a PDB that other drains may evict
	// against is sent, drawn when the PDB has room; tried: the PDBs this
	// drain sent an eviction against; contended: those it saw another
	// drain's eviction in the status of (see take)
	jitter           map[types.UID]time.Time
	tried, contended map[string]bool
	// behind: per PDB, since when a pod of this drain has waited its turn
	// behind other drains while the PDB had room (see take); announcing:
	// the announcements in flight, and the PDBs they name
	behind     map[string]time.Time
	lapsed     map[string]bool // behind past turnGrace, said in the log
	announcing int
	pdbScope   string // whose PDBs are watched, for the log
	pending    sets.Set[string]
	change     cluster.Signal // a pod's state changed
	freed      cluster.Signal // an eviction in flight returned

	sel selectors   // the PDBs' selectors, parsed
	dis disruptions // the pods the PDBs' statuses listed as disrupted

	// annTurn holds one announcement at a time (a channel, not a mutex:
	// it is held across API calls, and a goroutine waiting on a channel is
	// one the simulation's clock can see waiting)
	annTurn   chan struct{}
	announced string // what the last one said
}

// token is what admit took from a PDB for one eviction, given back if the
// eviction is refused.
type token struct {
	pdb, pod string
}

// start watches the node's pods and the PDBs of the pods' namespaces (one
// watch a namespace; one of all namespaces past maxPDBNamespaces), and waits until the pods' list is in
// (so every pod that goes from now on is seen going) and, for a while, the
// PDBs'. The pods' first list is read, the plan's (nil: listed now): the
// watch starts at its resourceVersion, so every pod the plan read is in the
// view, and every change since the plan's read is seen.
func (d *Drainer) start(ctx context.Context, node string, pods []corev1.Pod, read *corev1.PodList) *run {
	ctx, cancel := context.WithCancel(ctx)
	r := &run{ctx: ctx, cancel: cancel, annTurn: make(chan struct{}, 1), turns: d.opts.Turns, clock: d.opts.Clock, want: pods, mine: map[string]bool{}, state: map[types.UID]podState{}, reason: map[types.UID]error{},
		taken: map[string]map[string]time.Time{}, inflight: map[string]bool{}, jitter: map[types.UID]time.Time{}, tried: map[string]bool{}, contended: map[string]bool{},
		behind: map[string]time.Time{}, lapsed: map[string]bool{}, pending: sets.New[string]()}
	for _, p := range pods {
		r.state[p.UID] = statePending
		r.mine[p.Namespace+"/"+p.Name] = true
	}
	r.pods = d.watchPods(ctx, node, read)
	r.pdbs = d.watchPDBs(ctx, r)
	r.pods.WaitSynced(ctx)
	pctx, pcancel := context.WithTimeout(ctx, pdbSyncWait)
	r.pdbs.WaitSynced(pctx)
	pcancel()
	return r
}

// watchPods watches the pods of node from read (nil: listed now).
func (d *Drainer) watchPods(ctx context.Context, node string, read *corev1.PodList) *cluster.Informer {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	var first atomic.Pointer[corev1.PodList]
	if read != nil && read.ResourceVersion != "" {
		first.Store(read)
	}
	return cluster.Inform(ctx, &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if l := first.Swap(nil); l != nil {
				return l, nil // the plan's read: no second list (a relist lists)
			}
			o.FieldSelector = sel
			// a consistent read, not the watch cache's "0": a pod the plan
			// read (a quorum read) but a cache behind has not seen yet
			// would count as gone from the start, and the drain done early
			o.ResourceVersion = ""
			return d.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return d.client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &corev1.Pod{})
}

// watchPDBs watches the PDBs of the namespaces of r's pods only, one list
// and watch each (up to maxPDBNamespaces of them; past that, one of every
// namespace): a cluster's PDBs are not the node's. Only a change of a PDB
// that covers one of r's pods wakes its waits; each status's disrupted pods
// are recorded (take may see only the last). It sets r.pdbScope.
func (d *Drainer) watchPDBs(ctx context.Context, r *run) *cluster.Informer {
	var nss []string
	for _, p := range r.want {
		if !slices.Contains(nss, p.Namespace) {
			nss = append(nss, p.Namespace)
		}
	}
	r.pdbScope = fmt.Sprintf("%d namespaces", len(nss))
	if len(nss) == 1 {
		r.pdbScope = "namespace " + nss[0]
	}
	if len(nss) > maxPDBNamespaces {
		nss = []string{metav1.NamespaceAll}
		r.pdbScope = "every namespace"
	}
	var lws []*cache.ListWatch
	for _, ns := range nss {
		lws = append(lws, &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return d.client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return d.client.PolicyV1().PodDisruptionBudgets(ns).Watch(ctx, o)
			},
		})
	}
	return cluster.InformEach(ctx, lws, &policyv1.PodDisruptionBudget{}, func(obj any) bool {
		if !r.coversAny(obj) {
			return false
		}
		if pdb, ok := obj.(*policyv1.PodDisruptionBudget); ok {
			r.dis.record(pdb) // every status: take may see only the last
		}
		return true
	})
}

func (r *run) stop() { r.cancel() }

func (r *run) set(uid types.UID, s podState, err error) {
	r.mu.Lock()
	r.state[uid] = s
	if err != nil {
		r.reason[uid] = err
	}
	r.mu.Unlock()
	r.change.Broadcast()
}

// done records the end of a pod's eviction: err is why it failed.
func (r *run) done(uid types.UID, err error) {
	if err != nil {
		r.set(uid, stateFailed, err)
	}
}

func (r *run) get(uid types.UID) (podState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state[uid], r.reason[uid]
}

// present is the set of pod UIDs on the node as the watch last saw them.
func (r *run) present() map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, o := range r.pods.Store().List() {
		out[o.(*corev1.Pod).UID] = true
	}
	return out
}

// gone reports whether the pod (its UID: a replacement of the same name is
// not it) has left the node, as far as the watch has seen: one lookup, for
// the waits that ask it at each change of the node's pods.
func (r *run) gone(p corev1.Pod) bool {
	if !r.pods.Synced() {
		return false
	}
	_, seen := r.seen(p)
	return !seen
}

// seen is the pod as the watch last saw it, and whether it did: the same
// name and UID (a pod of the same name and another UID is not p).
func (r *run) seen(p corev1.Pod) (*corev1.Pod, bool) {
	o, ok, _ := r.pods.Store().GetByKey(p.Namespace + "/" + p.Name)
	if !ok || o.(*corev1.Pod).UID != p.UID {
		return nil, false
	}
	return o.(*corev1.Pod), true
}

// goneNow is gone for any pod, at one reading of the watch's store: a
// drain's end asks it of each of its pods.
func (r *run) goneNow() func(types.UID) bool {
	synced, present := r.pods.Synced(), r.present()
	return func(uid types.UID) bool { return synced && !present[uid] }
}

// current is the pod as the watch last saw it (p itself if unseen).
func (r *run) current(p corev1.Pod) corev1.Pod {
	if c, ok := r.seen(p); ok {
		return *c
	}
	return p
}

// waitUntil waits until cond holds, re-checking when a pod goes, a pod's
// eviction changes state, or ctx ends.
func (r *run) waitUntil(ctx context.Context, cond func(present map[types.UID]bool) bool) {
	for {
		podsC, stateC := r.pods.Changed(), r.change.C()
		if cond(r.present()) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-podsC:
		case <-stateC:
		}
	}
}

// waitTier waits until each of the tier's pods is gone, blocked by a PDB or
// given up (or, the pods' watch failing, at least accepted), or ctx ends.
func (r *run) waitTier(ctx context.Context, tier []corev1.Pod) {
	r.waitUntil(ctx, func(present map[types.UID]bool) bool {
		watchFailed := r.pods.Err() != nil
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range tier {
			switch r.state[p.UID] {
			case stateBlocked, stateFailed:
				continue
			case stateAccepted:
				if watchFailed || !present[p.UID] {
					continue
				}
			}
			return false
		}
		return true
	})
}

// waitGone waits until every pod is gone or given up, or ctx ends; its
// error is the pods' watch's, when it failed for good (a 403).
func (r *run) waitGone(ctx context.Context) error {
	r.waitUntil(ctx, func(present map[types.UID]bool) bool {
		if r.pods.Err() != nil {
			return true
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.want {
			if present[p.UID] && r.state[p.UID] != stateFailed {
				return false
			}
		}
		return true
	})
	if err := r.pods.Err(); err != nil {
		return fmt.Errorf("watching the node's pods: %w", err)
	}
	return nil
}
