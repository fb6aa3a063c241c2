// Package clustertest helps unit tests with client-go's fake clientset.
package clustertest

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Lists records the list requests a Paginate reactor served.
type Lists struct {
	mu   sync.Mutex
	reqs []Request
}

// Request is one list request: its resourceVersion, limit and continue.
type Request struct {
	ResourceVersion string
	Limit           int64
	Continue        string
	Items           int // items answered
}

// All is every request served so far.
func (l *Lists) All() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Request(nil), l.reqs...)
}

// Paginate makes the fake clientset answer lists of resource (plural, e.g.
// "nodes") the way the apiserver does and the fake does not: Limit items at
// most, and a continue token while more remain (the fake ignores both). The
// items are those of the tracker, in its order; filter, when not nil,
// keeps only those a field selector of the request would (the fake ignores
// field selectors too).
func Paginate(c *fake.Clientset, gvr schema.GroupVersionResource, filter func(a k8stesting.ListAction, o runtime.Object) bool) *Lists {
	l := &Lists{}
	c.PrependReactor("list", gvr.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		la := a.(k8stesting.ListActionImpl)
		if la.GetResource().Group != gvr.Group {
			return false, nil, nil
		}
		obj, err := c.Tracker().List(gvr, la.GetKind(), la.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		items, err := meta.ExtractList(obj)
		if err != nil {
			return true, nil, err
		}
		if filter != nil {
			kept := items[:0]
			for _, o := range items {
				if filter(la, o) {
					kept = append(kept, o)
				}
			}
			items = kept
		}
		opts := la.ListOptions
		from, _ := strconv.Atoi(opts.Continue)
		to := len(items)
		if opts.Limit > 0 && from+int(opts.Limit) < to {
			to = from + int(opts.Limit)
		}
		if from > to {
			from = to
		}
		if err := meta.SetList(obj, items[from:to]); err != nil {
			return true, nil, err
		}
		lm, _ := meta.ListAccessor(obj)
		if to < len(items) {
			lm.SetContinue(strconv.Itoa(to))
			rest := int64(len(items) - to)
			lm.SetRemainingItemCount(&rest)
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, Request{ResourceVersion: opts.ResourceVersion, Limit: opts.Limit, Continue: opts.Continue, Items: to - from})
		l.mu.Unlock()
		return true, obj, nil
	})
	return l
}
