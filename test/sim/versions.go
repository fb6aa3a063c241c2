package sim

import (
	"errors"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
)

// versioned is the world's tracker kept the way the apiserver keeps its
// objects: every write gets the next resourceVersion of one sequence (the
// tracker gives objects none, and lists a version of its own per resource)
// and is logged in that order, deletions included, so that a watch can
// start at a list's resourceVersion and see every change after it. The
// tracker's own watch starts "now", replaying the objects as they are: a
// deletion between a list and its watch was lost, and a watch seeded with a
// list could not be told from one that lists again.
type versioned struct {
	k8stesting.ObjectTracker

	mu   sync.Mutex // held across each write and its log entry, and each list
	rv   uint64     // the last resourceVersion given
	log  []change
	subs map[*logWatch]struct{}
	// watches started at a resourceVersion, and the writes they were
	// given from before they began
	from, replayed int
	// the log is compacted as kube-apiserver compacts etcd: every 5
	// minutes, to the resourceVersion noted (mark) the time before. A
	// watch of a resource is too old when it starts before a write of
	// that resource that was compacted away (dropped, by resource): the
	// watch cache keeps a quiet resource's history, a busy one's it drops
	mark      uint64
	compacted uint64 // the resourceVersion compacted up to (a read at an older one is refused)
	dropped   map[schema.GroupVersionResource]uint64
}

// change is one write, as a watch event at its resourceVersion.
type change struct {
	rv  uint64
	gvr schema.GroupVersionResource
	ns  string
	ev  watch.Event // its object a copy
}

func newVersioned() *versioned {
	return &versioned{
		ObjectTracker: k8stesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder()),
		subs:          map[*logWatch]struct{}{},
		dropped:       map[schema.GroupVersionResource]uint64{},
	}
}

// stamp gives obj the next resourceVersion; v.mu is held.
func (v *versioned) stamp(obj runtime.Object) {
	v.rv++
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatUint(v.rv, 10))
	}
}

// record logs a write done at v.rv and hands it to the watches from the log;
// v.mu is held.
func (v *versioned) record(gvr schema.GroupVersionResource, t watch.EventType, obj runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	c := change{rv: v.rv, gvr: gvr, ns: m.GetNamespace(), ev: watch.Event{Type: t, Object: obj.DeepCopyObject()}}
	v.log = append(v.log, c)
	for w := range v.subs {
		if w.wants(c) {
			w.push(c.ev)
		}
	}
}

func (v *versioned) Add(obj runtime.Object) error {
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		return err
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	return v.write(gvr, watch.Added, obj, func() error { return v.ObjectTracker.Add(obj) })
}

// inNamespace gives obj the namespace of the request that writes it, as the
// tracker gives its own copy: a watch of the namespace must see the write.
func inNamespace(obj runtime.Object, ns string) {
	if m, err := meta.Accessor(obj); err == nil && m.GetNamespace() == "" {
		m.SetNamespace(ns)
	}
}

func (v *versioned) Create(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.CreateOptions) error {
	inNamespace(obj, ns)
	return v.write(gvr, watch.Added, obj, func() error { return v.ObjectTracker.Create(gvr, obj, ns, opts...) })
}

func (v *versioned) Update(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.UpdateOptions) error {
	inNamespace(obj, ns)
	return v.write(gvr, watch.Modified, obj, func() error { return v.ObjectTracker.Update(gvr, obj, ns, opts...) })
}

func (v *versioned) Patch(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	inNamespace(obj, ns)
	return v.write(gvr, watch.Modified, obj, func() error { return v.ObjectTracker.Patch(gvr, obj, ns, opts...) })
}

// write stamps obj, stores it (store) and logs it, all under v.mu.
func (v *versioned) write(gvr schema.GroupVersionResource, t watch.EventType, obj runtime.Object, store func() error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stamp(obj)
	if err := store(); err != nil {
		return err
	}
	v.record(gvr, t, obj)
	return nil
}

// Apply is not served: nothing the function or the world does uses
// server-side apply, and its result would bypass the log.
func (v *versioned) Apply(schema.GroupVersionResource, runtime.Object, string, ...metav1.PatchOptions) error {
	return errors.New("server-side apply is not simulated")
}

// Delete logs the object as it was, at the deletion's resourceVersion, as
// the apiserver's DELETED event carries it.
func (v *versioned) Delete(gvr schema.GroupVersionResource, ns, name string, opts ...metav1.DeleteOptions) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, getErr := v.ObjectTracker.Get(gvr, ns, name)
	if err := v.ObjectTracker.Delete(gvr, ns, name, opts...); err != nil || getErr != nil {
		return err
	}
	gone := cur.DeepCopyObject()
	v.stamp(gone)
	v.record(gvr, watch.Deleted, gone)
	return nil
}

// List is a snapshot at the sequence's last resourceVersion: a watch from
// it sees every write after it.
func (v *versioned) List(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, ns string, opts ...metav1.ListOptions) (runtime.Object, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	obj, err := v.ObjectTracker.List(gvr, gvk, ns, opts...)
	if err != nil {
		return nil, err
	}
	if l, err := meta.ListAccessor(obj); err == nil {
		l.SetResourceVersion(strconv.FormatUint(v.rv, 10))
	}
	return obj, nil
}

// WatchFrom watches gvr in ns (all: "") from after resourceVersion rv: the
// logged writes since, then each one as it is done.
func (v *versioned) WatchFrom(gvr schema.GroupVersionResource, ns string, rv uint64) watch.Interface {
	w := &logWatch{v: v, gvr: gvr, ns: ns, wake: make(chan struct{}, 1), out: make(chan watch.Event), done: make(chan struct{})}
	v.mu.Lock()
	for _, c := range v.log {
		if c.rv > rv && w.wants(c) {
			w.queue = append(w.queue, c.ev)
		}
	}
	v.subs[w] = struct{}{}
	v.from++
	v.replayed += len(w.queue)
	v.mu.Unlock()
	go w.run()
	return w
}

// compact drops the log up to the resourceVersion noted at the last call,
// and notes the current one: what was written 5 to 10 minutes ago (called
// every 5) is history no watch can start from.
func (v *versioned) compact() {
	v.mu.Lock()
	defer v.mu.Unlock()
	upTo := v.mark
	v.mark = v.rv
	v.compacted = upTo
	i := 0
	for ; i < len(v.log) && v.log[i].rv <= upTo; i++ {
		v.dropped[v.log[i].gvr] = v.log[i].rv
	}
	v.log = append([]change(nil), v.log[i:]...)
}

// tooOld reports whether a watch of gvr from rv would need history that was
// compacted away.
func (v *versioned) tooOld(gvr schema.GroupVersionResource, rv uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return rv < v.dropped[gvr]
}

// compactedPast reports whether a read at rv needs history compacted away
// (etcd refuses it, whatever the resource).
func (v *versioned) compactedPast(rv uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return rv < v.compacted
}

// counts says how many watches started at a resourceVersion and how many
// writes made before them they were given.
func (v *versioned) counts() (from, replayed int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.from, v.replayed
}

// logWatch is a watch served from the log; a write never waits for it.
type logWatch struct {
	v     *versioned
	gvr   schema.GroupVersionResource
	ns    string
	mu    sync.Mutex
	queue []watch.Event
	wake  chan struct{}
	out   chan watch.Event
	done  chan struct{}
	once  sync.Once
}

func (w *logWatch) wants(c change) bool { return c.gvr == w.gvr && (w.ns == "" || w.ns == c.ns) }

func (w *logWatch) push(ev watch.Event) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *logWatch) run() {
	defer close(w.out)
	for {
		w.mu.Lock()
		evs := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range evs {
			select {
			case w.out <- ev:
			case <-w.done:
				return
			}
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-w.wake:
		case <-w.done:
			return
		}
	}
}

func (w *logWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *logWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.v.mu.Lock()
		delete(w.v.subs, w)
		w.v.mu.Unlock()
	})
}
