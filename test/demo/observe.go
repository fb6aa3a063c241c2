package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/node-drainer/node-drainer/test/harness"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// observer watches a scene (its namespace's pods, its nodes, the
// VolumeAttachments of its volumes) and prints every change that matters
// on the timeline as the apiserver reports it. It also keeps the lowest
// number of ready pods of one app seen (the PDB's guarantee).
type observer struct {
	tl    *timeline
	nodes map[string]bool // the scene's nodes
	pvs   map[string]bool // the scene's volumes
	app   string          // the app whose ready pods are counted
	want  int             // its replicas

	mu       sync.Mutex
	pods     map[string]*corev1.Pod // by UID
	minReady int
	vaGoneAt map[string]time.Time // node/pv → when its VolumeAttachment was gone
	stop     context.CancelFunc
}

func observe(ctx context.Context, c kubernetes.Interface, tl *timeline, ns string, nodes, pvs []string, app string, want int) (*observer, error) {
	o := &observer{tl: tl, nodes: set(nodes), pvs: set(pvs), app: app, want: want,
		pods: map[string]*corev1.Pod{}, minReady: want, vaGoneAt: map[string]time.Time{}}
	ctx, o.stop = context.WithCancel(ctx)
	pods := c.CoreV1().Pods(ns)
	err := follow(ctx, func(ctx context.Context) ([]*corev1.Pod, string, error) {
		l, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, "", err
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		clear(o.pods)
		for _, p := range ptrs(l.Items) {
			o.pods[string(p.UID)] = p
		}
		return ptrs(l.Items), l.ResourceVersion, nil
	}, pods.Watch, func(old, p *corev1.Pod, deleted bool) {
		if deleted {
			o.podGone(p)
		} else {
			o.pod(old, p)
		}
	})
	if err == nil {
		err = follow(ctx, func(ctx context.Context) ([]*corev1.Node, string, error) {
			l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, "", err
			}
			return ptrs(l.Items), l.ResourceVersion, nil
		}, c.CoreV1().Nodes().Watch, func(old, n *corev1.Node, deleted bool) {
			if old != nil && !deleted {
				o.node(old, n)
			}
		})
	}
	if err == nil {
		vas := c.StorageV1().VolumeAttachments()
		err = follow(ctx, func(ctx context.Context) ([]*storagev1.VolumeAttachment, string, error) {
			l, err := vas.List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, "", err
			}
			return ptrs(l.Items), l.ResourceVersion, nil
		}, vas.Watch, func(old, va *storagev1.VolumeAttachment, deleted bool) {
			if deleted {
				o.vaGone(va)
			} else {
				o.va(old, va)
			}
		})
	}
	if err != nil {
		o.stop()
		return nil, fmt.Errorf("watching the scene: %w", err)
	}
	return o, nil
}

// follow lists objects, then watches them from the list's resourceVersion
// until ctx ends (watching again when the server closes the watch), and
// calls handle for each change with the object's previous state (nil when
// it is new), on one goroutine. (client-go's informers would do, but their
// package needs a go.sum entry this module does not have.)
func follow[T metav1.Object](ctx context.Context, list func(context.Context) ([]T, string, error),
	watchFrom func(context.Context, metav1.ListOptions) (watch.Interface, error), handle func(old, obj T, deleted bool)) error {
	items, rv, err := list(ctx)
	if err != nil {
		return err
	}
	known := map[string]T{}
	for _, it := range items {
		known[it.GetNamespace()+"/"+it.GetName()] = it
	}
	w, err := watchFrom(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	go func() {
		var err error
		for ctx.Err() == nil {
			for ev := range w.ResultChan() {
				obj, ok := ev.Object.(T)
				if !ok { // a watch error (e.g. 410 Gone): start again from a fresh list
					rv = ""
					break
				}
				rv = obj.GetResourceVersion()
				key := obj.GetNamespace() + "/" + obj.GetName()
				old := known[key]
				switch ev.Type {
				case watch.Added, watch.Modified:
					known[key] = obj
					handle(old, obj, false)
				case watch.Deleted:
					delete(known, key)
					handle(old, obj, true)
				}
			}
			w.Stop()
			for ctx.Err() == nil {
				if rv == "" {
					var items []T
					if items, rv, err = list(ctx); err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					clear(known)
					for _, it := range items {
						known[it.GetNamespace()+"/"+it.GetName()] = it
					}
				}
				if w, err = watchFrom(ctx, metav1.ListOptions{ResourceVersion: rv}); err == nil {
					break
				}
				rv = ""
			}
		}
	}()
	return nil
}

func ptrs[T any](xs []T) []*T {
	out := make([]*T, len(xs))
	for i := range xs {
		out[i] = &xs[i]
	}
	return out
}

// minimum is the lowest number of ready pods of the app seen.
func (o *observer) minimum() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.minReady
}

// detachedAt is when the VolumeAttachment of pv on node was seen gone.
func (o *observer) detachedAt(node, pv string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.vaGoneAt[node+"/"+pv]
	return t, ok
}

func (o *observer) pod(old, p *corev1.Pod) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pods[string(p.UID)] = p
	var what string
	switch {
	case old == nil:
		return // a new pod: "running" follows
	case !harness.PodReady(old) && harness.PodReady(p):
		what = "running and ready on " + short(p.Spec.NodeName)
	case old.DeletionTimestamp == nil && p.DeletionTimestamp != nil:
		what = gone(p, "terminating on ")
	default:
		return
	}
	o.tl.printf("pod %-24s %s%s", p.Name, what, o.count(p))
}

// podGone reports a pod deleted from the apiserver, unless its eviction was
// reported already when it started terminating.
func (o *observer) podGone(p *corev1.Pod) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.pods, string(p.UID))
	switch {
	case p.DeletionTimestamp == nil:
		o.tl.printf("pod %-24s %s, at once (no graceful termination)%s", p.Name, gone(p, "deleted from "), o.count(p))
	case disruption(p) != evicted:
		o.tl.printf("pod %-24s %s%s", p.Name, gone(p, "deleted from "), o.count(p))
	}
}

// evicted is the DisruptionTarget reason the apiserver records for an
// eviction through the Eviction API.
const evicted = "EvictionByEvictionAPI"

// gone says how a pod leaves its node: "evicted from N" when the apiserver
// recorded an eviction, else what + N and the disruption reason if any.
func gone(p *corev1.Pod, what string) string {
	switch r := disruption(p); r {
	case evicted:
		return "evicted from " + short(p.Spec.NodeName)
	case "":
		return what + short(p.Spec.NodeName)
	default:
		return what + short(p.Spec.NodeName) + " (" + r + ")"
	}
}

// count updates the minimum and, for the counted app, says how many of its
// pods are ready; o.mu is held.
func (o *observer) count(p *corev1.Pod) string {
	if p.Labels["app"] != o.app || o.app == "" {
		return ""
	}
	n := 0
	for _, q := range o.pods {
		if q.Labels["app"] == o.app && harness.PodReady(q) {
			n++
		}
	}
	o.minReady = min(o.minReady, n)
	return fmt.Sprintf("   [%s ready %d/%d]", o.app, n, o.want)
}

func (o *observer) node(old, n *corev1.Node) {
	if !o.nodes[n.Name] {
		return
	}
	var changes []string
	if old.Spec.Unschedulable != n.Spec.Unschedulable {
		changes = append(changes, map[bool]string{true: "cordoned", false: "uncordoned"}[n.Spec.Unschedulable])
	}
	for _, t := range n.Spec.Taints {
		if !hasTaint(old.Spec.Taints, t) {
			changes = append(changes, "tainted "+taint(t))
		}
	}
	for _, t := range old.Spec.Taints {
		if !hasTaint(n.Spec.Taints, t) {
			changes = append(changes, "untainted "+taint(t))
		}
	}
	for k, v := range n.Labels {
		if _, had := old.Labels[k]; !had {
			changes = append(changes, "labelled "+k+"="+v)
		}
	}
	if a, b := nodeReady(old), nodeReady(n); a != b {
		changes = append(changes, "Ready="+b)
	}
	if len(changes) > 0 {
		o.tl.printf("node %s %s", short(n.Name), strings.Join(changes, ", "))
	}
}

func (o *observer) va(old, va *storagev1.VolumeAttachment) {
	pv := vaPV(va)
	if !o.pvs[pv] {
		return
	}
	node := short(va.Spec.NodeName)
	switch {
	case old == nil:
		o.tl.printf("volume %s: VolumeAttachment %s created for %s", pv, shortVA(va.Name), node)
	case !old.Status.Attached && va.Status.Attached:
		o.tl.printf("volume %s: attached to %s (VolumeAttachment %s attached=true)", pv, node, shortVA(va.Name))
	case old.DeletionTimestamp == nil && va.DeletionTimestamp != nil:
		o.tl.printf("volume %s: VolumeAttachment %s on %s deleted, detaching", pv, shortVA(va.Name), node)
	}
}

func (o *observer) vaGone(va *storagev1.VolumeAttachment) {
	if o.pvs[vaPV(va)] {
		o.mu.Lock()
		o.vaGoneAt[va.Spec.NodeName+"/"+vaPV(va)] = time.Now()
		o.mu.Unlock()
		o.tl.printf("volume %s: detached from %s (VolumeAttachment %s gone)", vaPV(va), short(va.Spec.NodeName), shortVA(va.Name))
	}
}

// disruption is the reason the apiserver or a controller recorded in the
// pod's DisruptionTarget condition, e.g. EvictionByEvictionAPI.
func disruption(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

func nodeReady(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status)
		}
	}
	return "Unknown"
}

func hasTaint(ts []corev1.Taint, t corev1.Taint) bool {
	return slices.ContainsFunc(ts, func(u corev1.Taint) bool { return u.MatchTaint(&t) })
}

func taint(t corev1.Taint) string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + string(t.Effect)
}

func vaPV(va *storagev1.VolumeAttachment) string {
	if va.Spec.Source.PersistentVolumeName == nil {
		return ""
	}
	return *va.Spec.Source.PersistentVolumeName
}

// short is a node's name without the DNS domain.
func short(node string) string {
	if node == "" {
		return "(no node)"
	}
	name, _, _ := strings.Cut(node, ".")
	return name
}

// shortVA shortens csi-<sha256> names.
func shortVA(name string) string {
	if len(name) > 14 {
		return name[:14] + "…"
	}
	return name
}

func set(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}
