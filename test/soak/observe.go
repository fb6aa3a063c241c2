package soak

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
)

// observer watches the day's pods and Nodes and every VolumeAttachment,
// and remembers what it saw of each pod: where it was bound and when, when
// it began terminating and when it was gone.
type observer struct {
	mu    sync.Mutex
	pods  map[string]*podSeen // by namespace/name
	uids  map[string]*podSeen // by UID
	vas   map[string]string   // VolumeAttachment name: node
	stop  chan struct{}
	pod   cache.Store
	nodes cache.Store
	va    cache.Store
}

type podSeen struct {
	key, uid, node, app   string
	stays                 bool // a DaemonSet's or a mirror pod
	bound, deleting, gone time.Time
}

func (d *day) observe() (*observer, error) {
	o := &observer{pods: map[string]*podSeen{}, uids: map[string]*podSeen{}, vas: map[string]string{}, stop: make(chan struct{})}
	ns := informers.NewSharedInformerFactoryWithOptions(d.env.Client, 0, informers.WithNamespace(d.name))
	all := informers.NewSharedInformerFactory(d.env.Client, 0)
	pods := ns.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.sawPod(obj, false) },
		UpdateFunc: func(_, obj any) { o.sawPod(obj, false) },
		DeleteFunc: func(obj any) { o.sawPod(obj, true) },
	})
	vas := all.Storage().V1().VolumeAttachments().Informer()
	_, _ = vas.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.sawVA(obj) },
		UpdateFunc: func(_, obj any) { o.sawVA(obj) },
	})
	nodes := all.Core().V1().Nodes().Informer()
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			was, _ := old.(*corev1.Node)
			if n, ok := cur.(*corev1.Node); ok {
				d.outOfService(was, n)
			}
		},
	})
	o.pod, o.va, o.nodes = pods.GetStore(), vas.GetStore(), nodes.GetStore()
	ns.Start(o.stop)
	all.Start(o.stop)
	ns.WaitForCacheSync(o.stop)
	all.WaitForCacheSync(o.stop)
	return o, nil
}

func (o *observer) close() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
}

func (o *observer) sawPod(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	key := p.Namespace + "/" + p.Name
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.uids[string(p.UID)]
	if s == nil {
		s = &podSeen{key: key, uid: string(p.UID), app: p.Labels["app"], stays: harness.StaysOnNode(p)}
		o.uids[s.uid] = s
	}
	o.pods[key] = s
	if s.node == "" && p.Spec.NodeName != "" {
		s.node, s.bound = p.Spec.NodeName, now
	}
	if p.DeletionTimestamp != nil && s.deleting.IsZero() {
		s.deleting = now
	}
	if (deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) && s.gone.IsZero() {
		s.gone = now
	}
}

func (o *observer) sawVA(obj any) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return
	}
	o.mu.Lock()
	o.vas[va.Name] = va.Spec.NodeName
	o.mu.Unlock()
}

// podNode is what was seen of the pod ns/name at t: the incarnation of
// that UID when one is given, else the last bound by then.
func (o *observer) podNode(key, uid string, t time.Time) (*podSeen, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.pods[key]
	for _, u := range o.uids {
		if u.key == key && !u.bound.IsZero() && !u.bound.After(t) && (s == nil || s.bound.After(t) || u.bound.After(s.bound)) {
			s, ok = u, true
		}
	}
	if u, found := o.uids[uid]; uid != "" && found {
		s, ok = u, true
	}
	if !ok {
		return nil, false
	}
	c := *s
	return &c, true
}

// vaNode is the node of a VolumeAttachment.
func (o *observer) vaNode(name string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.vas[name]
}

// left are the pods the drain of node had to see gone that were still
// there at t: bound before bound, not gone by t.
func (o *observer) left(nodeName string, bound, t time.Time) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, s := range o.uids {
		if s.node != nodeName || s.stays || s.bound.After(bound) {
			continue
		}
		if s.gone.IsZero() || s.gone.After(t) {
			out = append(out, s.key)
		}
	}
	return out
}

// attached are the VolumeAttachments of node now.
func (o *observer) attached(nodeName string) []string {
	var out []string
	for _, obj := range o.va.List() {
		if va := obj.(*storagev1.VolumeAttachment); va.Spec.NodeName == nodeName {
			out = append(out, va.Name)
		}
	}
	return out
}

// healthy counts the pods of app now ready and not terminating.
func (o *observer) healthy(app string) int {
	n := 0
	for _, obj := range o.pod.List() {
		p := obj.(*corev1.Pod)
		if p.Labels["app"] == app && harness.PodReady(p) {
			n++
		}
	}
	return n
}

// node is the Node now (nil: none).
func (o *observer) node(name string) *corev1.Node {
	obj, ok, _ := o.nodes.GetByKey(name)
	if !ok {
		return nil
	}
	return obj.(*corev1.Node)
}

// marks are node-drainer's marks on a Node.
func marks(n *corev1.Node) []string {
	var out []string
	if s, ok := node.Marks(n); ok {
		for c := range s.Causes {
			out = append(out, "mark "+string(c))
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == node.TaintDraining || t.Key == node.TaintOutOfService {
			out = append(out, "taint "+t.Key)
		}
	}
	return out
}
