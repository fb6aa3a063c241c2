package volume

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
)

const nodeName = "ip-10-0-1-23.ec2.internal"

func claim(ns, name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv},
	}
}

func attachment(name, node, pv string) *storagev1.VolumeAttachment {
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: "ebs.csi.aws.com", NodeName: node},
	}
	if pv != "" {
		va.Spec.Source.PersistentVolumeName = &pv
	}
	return va
}

func pod(ns, name, node string, mirror bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
	if mirror {
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	}
	return p
}

func forbidden(resource string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("rbac"))
}

// byNode makes the fake clientset honour the spec.nodeName field selector
// on pod lists, as the apiserver does (the fake ignores field selectors).
func byNode(c *fake.Clientset) {
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		obj, err := c.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		kept := list.Items[:0]
		for _, p := range list.Items {
			if sel == nil || sel.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName, "metadata.name": p.Name}) {
				kept = append(kept, p)
			}
		}
		list.Items = kept
		return true, list, nil
	})
}

// fail makes every verb on resource answer err.
func fail(c *fake.Clientset, verb, resource string, err error) {
	c.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
}

func TestPersistentVolumes(t *testing.T) {
	objs := []runtime.Object{claim("db", "data-0", "pv-a"), claim("db", "pending", ""), claim("ci", "work", "pv-b")}
	for _, tc := range []struct {
		name    string
		claims  []string
		want    []string
		failGet error
		wantErr bool
	}{
		{"none", nil, nil, nil, false},
		{"bound, in order", []string{"ci/work", "db/data-0"}, []string{"pv-b", "pv-a"}, nil, false},
		{"unbound, missing and malformed left out", []string{"db/pending", "db/gone", "no-slash", "db/data-0"}, []string{"pv-a"}, nil, false},
		{"unreadable", []string{"db/data-0"}, nil, forbidden("persistentvolumeclaims"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(objs...)
			if tc.failGet != nil {
				fail(c, "get", "persistentvolumeclaims", tc.failGet)
			}
			got, err := PersistentVolumes(context.Background(), c, tc.claims)
			if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
			if tc.wantErr && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "db/data-0")) {
				t.Errorf("error %q: want the 403 wrapped with the claim", err)
			}
		})
	}
}

func TestAttachments(t *testing.T) {
	c := fake.NewClientset(
		attachment("csi-a", nodeName, "pv-a"),
		attachment("csi-b", nodeName, "pv-b"),
		attachment("csi-inline", nodeName, ""),
		attachment("csi-other", "other-node", "pv-a"),
	)
	for _, tc := range []struct {
		name string
		pvs  []string
		want []string
	}{
		{"all of the node", nil, []string{"csi-a", "csi-b", "csi-inline"}},
		{"only these volumes", []string{"pv-b", "pv-z"}, []string{"csi-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vas, err := Attachments(context.Background(), c, nodeName, tc.pvs)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, va := range vas {
				got = append(got, va.Name)
			}
			slices.Sort(got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	fail(c, "list", "volumeattachments", forbidden("volumeattachments"))
	if _, err := Attachments(context.Background(), c, nodeName, nil); !apierrors.IsForbidden(err) {
		t.Errorf("error %v: want the 403 wrapped", err)
	}
}

func TestWaitDetached(t *testing.T) {
	for _, tc := range []struct {
		name     string
		objs     []runtime.Object
		pvs      []string
		setup    func(*fake.Clientset)
		detachIn time.Duration // csi-a is deleted after this (0: never)
		left     []string
		timeout  bool
		forbid   bool
	}{
		{name: "no volumes: at once", pvs: nil},
		{name: "already detached", objs: []runtime.Object{attachment("csi-other", "other-node", "pv-a")}, pvs: []string{"pv-a"}},
		{name: "detached while waiting", objs: []runtime.Object{attachment("csi-a", nodeName, "pv-a")}, pvs: []string{"pv-a"}, detachIn: 150 * time.Millisecond},
		{name: "still attached at the deadline", objs: []runtime.Object{attachment("csi-a", nodeName, "pv-a"), attachment("csi-b", nodeName, "pv-b")},
			pvs: []string{"pv-a"}, left: []string{"csi-a (pv pv-a)"}, timeout: true},
		{name: "unreadable until the deadline: a timeout, nothing known detached", pvs: []string{"pv-a", "pv-b"},
			setup: func(c *fake.Clientset) { fail(c, "list", "volumeattachments", apierrors.NewServiceUnavailable("down")) },
			left:  []string{"pv-a", "pv-b"}, timeout: true},
		{name: "forbidden: at once, not a timeout", pvs: []string{"pv-a"},
			setup: func(c *fake.Clientset) { fail(c, "list", "volumeattachments", forbidden("volumeattachments")) },
			left:  []string{"pv-a"}, forbid: true},
		{name: "watch forbidden: at once, not a timeout", objs: []runtime.Object{attachment("csi-a", nodeName, "pv-a")}, pvs: []string{"pv-a"},
			setup: func(c *fake.Clientset) {
				c.PrependWatchReactor("volumeattachments", func(k8stesting.Action) (bool, watch.Interface, error) {
					return true, nil, forbidden("volumeattachments")
				})
			},
			left: nil, forbid: true}, // left: the list's view, or the PVs, as the 403 races the sync
	} {
		// in a synctest bubble: the deadlines and the detach are on the
		// bubble's clock, so the informer's list is read before a 250 ms
		// deadline however loaded the machine (a list read after it would
		// leave the PVs as "left" instead of the attachment)
		t.Run(tc.name, func(t *testing.T) {
			clustertest.Bubble(t, func(t *testing.T) {
				c := fake.NewClientset(tc.objs...)
				if tc.setup != nil {
					tc.setup(c)
				}
				if tc.detachIn > 0 {
					// deleted once the watch is open, as a detach would be
					opened := make(chan struct{}, 10)
					c.PrependWatchReactor("volumeattachments", func(k8stesting.Action) (bool, watch.Interface, error) {
						opened <- struct{}{}
						return false, nil, nil
					})
					go func() {
						<-opened
						time.Sleep(tc.detachIn)
						_ = c.StorageV1().VolumeAttachments().Delete(context.Background(), "csi-a", metav1.DeleteOptions{})
					}()
				}
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				if tc.timeout {
					ctx, cancel = context.WithTimeout(t.Context(), 250*time.Millisecond)
				}
				defer cancel()
				start := time.Now()
				left, err := WaitDetached(ctx, c, nodeName, tc.pvs)
				if (tc.left != nil || !tc.forbid) && !reflect.DeepEqual(left, tc.left) {
					t.Errorf("left %q, want %q", left, tc.left)
				}
				if errors.Is(err, ErrTimeout) != tc.timeout || apierrors.IsForbidden(err) != tc.forbid {
					t.Errorf("error %v: timeout %v forbidden %v, want %v %v", err, errors.Is(err, ErrTimeout), apierrors.IsForbidden(err), tc.timeout, tc.forbid)
				}
				if tc.timeout && !strings.Contains(err.Error(), nodeName) {
					t.Errorf("error %q does not name the node", err)
				}
				if tc.forbid && time.Since(start) > time.Second {
					t.Errorf("a 403 was waited on for %s", time.Since(start))
				}
			})
		})
	}
}

func TestForceRelease(t *testing.T) {
	objs := func() []runtime.Object {
		return []runtime.Object{
			pod("apps", "web-1", nodeName, false),
			pod("db", "db-0", nodeName, false),
			pod("kube-system", "static", nodeName, true),
			pod("apps", "elsewhere", "other-node", false),
			attachment("csi-a", nodeName, "pv-a"),
			attachment("csi-other", "other-node", "pv-b"),
		}
	}
	wantPods, wantVAs := []string{"apps/web-1", "db/db-0"}, []string{"csi-a (pv pv-a)"}
	for _, tc := range []struct {
		name    string
		dryRun  bool
		setup   func(*fake.Clientset)
		pods    []string
		vas     []string
		wantErr string
		deleted bool
	}{
		{name: "deletes pods with grace 0 and attachments", pods: wantPods, vas: wantVAs, deleted: true},
		{name: "dry run deletes nothing", dryRun: true, pods: wantPods, vas: wantVAs},
		{name: "already gone is not an error", pods: wantPods, vas: wantVAs, setup: func(c *fake.Clientset) {
			fail(c, "delete", "pods", apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x"))
			fail(c, "delete", "volumeattachments", apierrors.NewNotFound(schema.GroupResource{Resource: "volumeattachments"}, "csi-a"))
		}},
		{name: "refused deletions are reported", pods: nil, vas: nil, wantErr: "force-deleting pod", setup: func(c *fake.Clientset) {
			fail(c, "delete", "pods", forbidden("pods"))
			fail(c, "delete", "volumeattachments", forbidden("volumeattachments"))
		}},
		{name: "pods unreadable", wantErr: "listing pods", setup: func(c *fake.Clientset) { fail(c, "list", "pods", forbidden("pods")) }},
		{name: "attachments unreadable", pods: wantPods, wantErr: "listing volume attachments", setup: func(c *fake.Clientset) {
			fail(c, "list", "volumeattachments", forbidden("volumeattachments"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(objs()...)
			byNode(c)
			if tc.setup != nil {
				tc.setup(c)
			}
			rel, err := ForceRelease(context.Background(), c, nodeName, tc.dryRun, nil)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if tc.wantErr != "" && !apierrors.IsForbidden(err) {
				t.Errorf("error %q: want the 403 wrapped", err)
			}
			if !reflect.DeepEqual(rel.PodsDeleted, tc.pods) || !reflect.DeepEqual(rel.AttachmentsDeleted, tc.vas) {
				t.Errorf("released %+v, want pods %v attachments %v", rel, tc.pods, tc.vas)
			}
			var deletes []string
			for _, a := range c.Actions() {
				if a.GetVerb() != "delete" {
					continue
				}
				d := a.(k8stesting.DeleteAction)
				deletes = append(deletes, d.GetResource().Resource+"/"+d.GetName())
				opts := d.GetDeleteOptions()
				if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != types.UID("uid-"+d.GetName()) {
					t.Errorf("%s deleted without its UID as precondition", d.GetName())
				}
				if d.GetResource().Resource == "pods" && (opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0) {
					t.Errorf("pod %s deleted without grace period 0", d.GetName())
				}
			}
			if tc.dryRun && len(deletes) > 0 {
				t.Errorf("dry run deleted %v", deletes)
			}
			if tc.deleted {
				slices.Sort(deletes)
				if want := []string{"pods/db-0", "pods/web-1", "volumeattachments/csi-a"}; !reflect.DeepEqual(deletes, want) {
					t.Errorf("deleted %v, want %v (mirror pods and other nodes left alone)", deletes, want)
				}
				if _, err := c.CoreV1().Pods("kube-system").Get(context.Background(), "static", metav1.GetOptions{}); err != nil {
					t.Errorf("mirror pod deleted: %v", err)
				}
			}
		})
	}
}

// pinnedDeletes makes the fake clientset honour delete preconditions, as the
// apiserver does: a UID or resourceVersion that is not the object's current
// one is a 409 Conflict.
func pinnedDeletes(c *fake.Clientset, resource string) {
	c.PrependReactor("delete", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		pre := d.GetDeleteOptions().Preconditions
		obj, err := c.Tracker().Get(d.GetResource(), d.GetNamespace(), d.GetName())
		if err != nil || pre == nil {
			return false, nil, nil
		}
		m, _ := meta.Accessor(obj)
		if pre.UID != nil && *pre.UID != m.GetUID() || pre.ResourceVersion != nil && *pre.ResourceVersion != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(d.GetResource().GroupResource(), d.GetName(), errors.New("precondition failed"))
		}
		return false, nil, nil
	})
}

// A dead node's pod changes between the reading and the force-delete (the
// node controller marks it not Ready as the node goes NotReady): the delete
// meets a conflict, the pod is read again and deleted at its new version.
// A retry of the same delete would meet the same conflict until the
// deadline (seen: a sweep's release held 13 minutes).
func TestForceReleaseRereadsAChangedPod(t *testing.T) {
	p := pod("db", "db-0", nodeName, false)
	p.ResourceVersion = "1"
	c := fake.NewClientset(p)
	byNode(c)
	pinnedDeletes(c, "pods")
	changed := false
	c.PrependReactor("list", "pods", func(_ k8stesting.Action) (bool, runtime.Object, error) {
		if changed {
			return false, nil, nil
		}
		changed = true // the first reading sees version 1; right after it, the pod changes
		q := p.DeepCopy()
		q.ResourceVersion = "2"
		q.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		if err := c.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), q, q.Namespace); err != nil {
			return true, nil, err
		}
		return true, &corev1.PodList{Items: []corev1.Pod{*p}}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rel, err := ForceRelease(ctx, c, nodeName, false, nil)
	if err != nil || !reflect.DeepEqual(rel.PodsDeleted, []string{"db/db-0"}) {
		t.Fatalf("ForceRelease = %+v, %v; want db/db-0 deleted", rel, err)
	}
	var versions []string
	for _, a := range c.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
			versions = append(versions, *d.GetDeleteOptions().Preconditions.ResourceVersion)
		}
	}
	if !reflect.DeepEqual(versions, []string{"1", "2"}) {
		t.Errorf("deletes at versions %v, want 1 (refused) then 2", versions)
	}
	if _, err := c.CoreV1().Pods("db").Get(ctx, "db-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there: %v", err)
	}
}

// rendezvous is met when n parties have arrived; each waits for the others
// at most a few seconds (false: they did not all come, as happens when the
// parties run one after another).
type rendezvous struct {
	mu   sync.Mutex
	n    int
	all  chan struct{}
	seen []string
}

func newRendezvous(n int) *rendezvous { return &rendezvous{n: n, all: make(chan struct{})} }

// arrived says who came, in order.
func (r *rendezvous) arrived() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func (r *rendezvous) meet(who string) bool {
	r.mu.Lock()
	r.seen = append(r.seen, who)
	if len(r.seen) == r.n {
		close(r.all)
	}
	r.mu.Unlock()
	select {
	case <-r.all:
		return true
	case <-time.After(3 * time.Second):
		return false
	}
}

// meetingDeletes is the clientset whose pod deletions meet at r before they
// are sent (the fake clientset runs its reactors one at a time, so the
// meeting is held before them).
type meetingDeletes struct {
	*fake.Clientset
	r *rendezvous
}

func (c meetingDeletes) CoreV1() typedcorev1.CoreV1Interface {
	return meetingCore{c.Clientset.CoreV1(), c.r}
}

type meetingCore struct {
	typedcorev1.CoreV1Interface
	r *rendezvous
}

func (c meetingCore) Pods(ns string) typedcorev1.PodInterface {
	return meetingPods{c.CoreV1Interface.Pods(ns), c.r}
}

type meetingPods struct {
	typedcorev1.PodInterface
	r *rendezvous
}

func (p meetingPods) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	if !p.r.meet(name) {
		return forbidden(fmt.Sprintf("pods: deleted one after another (%v)", p.r.arrived()))
	}
	return p.PodInterface.Delete(ctx, name, o)
}

// Each guard runs beside the reading of what its step deletes, and both end
// before anything is deleted: the pods' list meets the first guard, the
// attachments' list the second. A guard that objects stops the step even
// though the reading beside it succeeded; the dead node's pods are deleted
// side by side.
func TestForceReleaseGuardsBesideItsReads(t *testing.T) {
	objs := []runtime.Object{
		pod("a", "p-1", nodeName, false), pod("a", "p-2", nodeName, false), pod("a", "p-3", nodeName, false),
		attachment("csi-a", nodeName, "pv-a"),
	}
	t.Run("each guard beside its reading, the pods deleted at once", func(t *testing.T) {
		c := fake.NewClientset(objs...)
		byNode(c)
		first, second, deletes := newRendezvous(2), newRendezvous(2), newRendezvous(3)
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if !first.meet("pods' list") {
				return true, nil, forbidden(fmt.Sprintf("pods: the list met no guard (%v)", first.arrived()))
			}
			return false, nil, nil
		})
		c.PrependReactor("list", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
			if !second.meet("attachments' list") {
				return true, nil, forbidden(fmt.Sprintf("volumeattachments: the list met no guard (%v)", second.arrived()))
			}
			return false, nil, nil
		})
		guards := 0
		guard := func(context.Context) error {
			guards++
			if r := map[int]*rendezvous{1: first, 2: second}[guards]; r != nil && !r.meet(fmt.Sprint("guard ", guards)) {
				return fmt.Errorf("guard %d met no reading (%v)", guards, r.arrived())
			}
			return nil
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		rel, err := ForceRelease(ctx, meetingDeletes{c, deletes}, nodeName, false, NewVerdict(guard))
		if err != nil || len(rel.PodsDeleted) != 3 || len(rel.AttachmentsDeleted) != 1 {
			t.Fatalf("ForceRelease = %+v, %v; want 3 pods and 1 attachment released", rel, err)
		}
	})
	for _, objects := range []int{1, 2} {
		t.Run(fmt.Sprintf("guard %d objects", objects), func(t *testing.T) {
			c := fake.NewClientset(objs...)
			byNode(c)
			guards := 0
			notSafe := errors.New("not safe: EC2 says running")
			guard := func(context.Context) error {
				if guards++; guards == objects {
					return notSafe
				}
				return nil
			}
			rel, err := ForceRelease(t.Context(), c, nodeName, false, NewVerdict(guard))
			if !errors.Is(err, notSafe) {
				t.Fatalf("ForceRelease = %+v, %v; want the guard's objection", rel, err)
			}
			var deleted []string
			for _, a := range c.Actions() {
				if a.GetVerb() == "delete" {
					deleted = append(deleted, a.GetResource().Resource+"/"+a.(k8stesting.DeleteAction).GetName())
				}
			}
			if want := map[int]int{1: 0, 2: 3}[objects]; len(deleted) != want {
				t.Errorf("deleted %v: want %d deletions (nothing after the objection)", deleted, want)
			}
		})
	}
}

// An attachment replaced under the same name (another UID) since the
// reading is not the one read: it is neither deleted nor reported deleted,
// and the release goes on.
func TestForceReleaseLeavesAReplacedAttachment(t *testing.T) {
	va := attachment("csi-a", nodeName, "pv-a")
	c := fake.NewClientset(va)
	byNode(c)
	pinnedDeletes(c, "volumeattachments")
	c.PrependReactor("list", "volumeattachments", func(_ k8stesting.Action) (bool, runtime.Object, error) {
		// the reading sees the old attachment; by the delete it is replaced
		old := va.DeepCopy()
		n := va.DeepCopy()
		n.UID = "uid-replacement"
		if err := c.Tracker().Update(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), n, ""); err != nil {
			return true, nil, err
		}
		return true, &storagev1.VolumeAttachmentList{Items: []storagev1.VolumeAttachment{*old}}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rel, err := ForceRelease(ctx, c, nodeName, false, nil)
	if err != nil || len(rel.AttachmentsDeleted) != 0 {
		t.Fatalf("ForceRelease = %+v, %v; want nothing reported deleted, no error", rel, err)
	}
	if got, err := c.StorageV1().VolumeAttachments().Get(ctx, "csi-a", metav1.GetOptions{}); err != nil || got.UID != "uid-replacement" {
		t.Errorf("replacement = %v, %v; want it left in place", got, err)
	}
}

// DeleteAttachment names the attachment's UID; one already gone is no
// error; another failure says what it was deleting.
func TestDeleteAttachment(t *testing.T) {
	va := attachment("csi-1", "gone-node", "pv-1")
	for _, tc := range []struct {
		name    string
		answer  error
		wantErr bool
	}{
		{name: "deleted"},
		{name: "gone already", answer: apierrors.NewNotFound(schema.GroupResource{Resource: "volumeattachments"}, va.Name)},
		{name: "forbidden", answer: forbidden("volumeattachments"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(va.DeepCopy())
			var pre *metav1.Preconditions
			c.PrependReactor("delete", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
				pre = a.(k8stesting.DeleteAction).GetDeleteOptions().Preconditions
				return tc.answer != nil, nil, tc.answer
			})
			err := DeleteAttachment(context.Background(), c, va)
			if (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), "deleting volume attachment csi-1")) {
				t.Errorf("DeleteAttachment: %v, want an error: %v", err, tc.wantErr)
			}
			if pre == nil || pre.UID == nil || *pre.UID != va.UID {
				t.Errorf("preconditions %+v: want the attachment's UID", pre)
			}
		})
	}
}

// An apiserver without the spec.nodeName selector on VolumeAttachments
// (400, as Kubernetes 1.35 answers) is asked once: the attachments are then
// listed in pages of PageSize, the node's kept; any other error is the
// reading's.
func TestAttachmentsWithoutNodeSelector(t *testing.T) {
	ForgetSelectorSupport()
	defer ForgetSelectorSupport()
	var objs []runtime.Object
	for i := range 1200 {
		n := "other-node"
		if i%100 == 0 {
			n = nodeName
		}
		objs = append(objs, attachment(fmt.Sprintf("csi-%04d", i), n, fmt.Sprintf("pv-%04d", i)))
	}
	c := fake.NewClientset(objs...)
	lists := clustertest.Paginate(c, storagev1.SchemeGroupVersion.WithResource("volumeattachments"), nil)
	selectors := 0
	c.PrependReactor("list", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.ListActionImpl).ListOptions.FieldSelector != "" {
			selectors++
			return true, nil, apierrors.NewBadRequest(`"spec.nodeName" is not a known field selector: only "metadata.name", "metadata.namespace"`)
		}
		return false, nil, nil
	})
	for range 2 {
		vas, err := Attachments(context.Background(), c, nodeName, nil)
		if err != nil || len(vas) != 12 {
			t.Fatalf("Attachments = %d, %v: want the node's 12", len(vas), err)
		}
	}
	if selectors != 1 {
		t.Errorf("the selector was tried %d times, want once", selectors)
	}
	reqs := lists.All()
	if len(reqs) != 6 {
		t.Errorf("%d pages read, want 3 per reading", len(reqs))
	}
	for _, r := range reqs {
		if r.Limit != PageSize {
			t.Errorf("page %+v: want limit %d", r, PageSize)
		}
	}
}

// A guard's verdict holds for GuardFresh: a delete retried later (the
// apiserver failed its first attempt) asks the guard again first, and an
// objection then stops it and every delete after it (safety rule 11).
func TestForceReleaseAsksAgainWhenItsVerdictIsOld(t *testing.T) {
	for _, res := range []string{"pods", "volumeattachments"} {
		t.Run(res, func(t *testing.T) {
			clustertest.Bubble(t, func(t *testing.T) {
				c := fake.NewClientset(pod("a", "p-1", nodeName, false), attachment("csi-a", nodeName, "pv-a"))
				byNode(c)
				// an attempt that hangs, then fails: the hang is outside the
				// fake clientset (a reactor that slept would hold its lock,
				// and any call beside it would stop the bubble's clock)
				hung, failed := false, false
				slow := clustertest.Outside{Interface: c, Before: func(verb, resource, _ string) {
					if verb == "delete" && resource == res && !hung {
						hung = true
						time.Sleep(GuardFresh)
					}
				}}
				c.PrependReactor("delete", res, func(k8stesting.Action) (bool, runtime.Object, error) {
					if failed {
						return false, nil, nil
					}
					failed = true
					return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
				})
				guards := 0
				notSafe := errors.New("not safe: EC2 says pending")
				guard := func(context.Context) error {
					guards++
					if res == "pods" && guards == 2 || res == "volumeattachments" && guards == 3 {
						return notSafe // the instance started again meanwhile
					}
					return nil
				}
				rel, err := ForceRelease(t.Context(), slow, nodeName, false, NewVerdict(guard))
				if !errors.Is(err, notSafe) {
					t.Fatalf("ForceRelease = %+v, %v; want the objection of the guard asked again before the retry", rel, err)
				}
				for _, a := range c.Actions() {
					if a.GetVerb() == "delete" && a.GetResource().Resource == res {
						if _, err := c.Tracker().Get(a.GetResource(), a.GetNamespace(), a.(k8stesting.DeleteAction).GetName()); err != nil {
							t.Errorf("%s/%s deleted after the guard objected", res, a.(k8stesting.DeleteAction).GetName())
						}
					}
				}
				if res == "pods" && len(rel.PodsDeleted) != 0 || len(rel.AttachmentsDeleted) != 0 {
					t.Errorf("released %+v: want nothing of %s", rel, res)
				}
			})
		})
	}
}

// Verdict.Fresh asks the guard only when its last pass is GuardFresh old;
// an objection stands.
func TestVerdict(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		asked, answer := 0, error(nil)
		v := NewVerdict(func(context.Context) error { asked++; return answer })
		ctx := t.Context()
		if err := v.Check(ctx); err != nil || asked != 1 {
			t.Fatalf("Check = %v after %d askings; want a pass after 1", err, asked)
		}
		time.Sleep(GuardFresh - time.Millisecond)
		if err := v.Fresh(ctx); err != nil || asked != 1 {
			t.Fatalf("Fresh within GuardFresh = %v after %d askings; want the last pass, not asked again", err, asked)
		}
		time.Sleep(time.Millisecond)
		answer = errors.New("EC2 says running")
		if err := v.Fresh(ctx); !errors.Is(err, answer) || asked != 2 {
			t.Fatalf("Fresh at GuardFresh = %v after %d askings; want asked again, its objection", err, asked)
		}
		answer = nil
		if err := v.Check(ctx); err == nil || asked != 2 {
			t.Fatalf("Check after an objection = %v after %d askings; want the objection, not asked again", err, asked)
		}
	})
}
