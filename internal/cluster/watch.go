package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// ErrWaitTimeout is what Until returns when its context ends before the
// condition holds; a failure of the list or watch itself is never one.
var ErrWaitTimeout = errors.New("timed out waiting for the condition")

// Until lists the objects lw yields, then watches them from the list's
// resourceVersion (client-go's watchtools.UntilWithSync: a watch that
// breaks, or whose version is too old, is re-listed), and returns once done
// holds for the objects as they are now (the synced store), or ctx ends
// (an error matching ErrWaitTimeout and ctx's error).
//
// A list or watch refused for good (403, 404, 400/422: a retry or re-list
// cannot cure it) ends the wait at once with that error, wrapped, so that a
// missing permission is never mistaken for a timeout.
func Until(ctx context.Context, lw *cache.ListWatch, obj runtime.Object, done func(cache.Store) (bool, error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		final error // the first error a re-list cannot cure
	)
	guarded := guard(lw, func(err error) {
		mu.Lock()
		if final == nil {
			final = err
		}
		mu.Unlock()
		cancel()
	})
	var (
		smu   sync.Mutex
		store cache.Store
	)
	current := func() cache.Store {
		smu.Lock()
		defer smu.Unlock()
		return store
	}
	_, err := watchtools.UntilWithSync(ctx, listThenWatch{guarded}, obj,
		func(s cache.Store) (bool, error) {
			smu.Lock()
			store = s
			smu.Unlock()
			return done(s)
		},
		func(watch.Event) (bool, error) { return done(current()) })
	mu.Lock()
	defer mu.Unlock()
	switch {
	case final != nil:
		return final
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ErrWaitTimeout, context.Cause(ctx))
	}
	return err // done's own error
}

// Final reports a list or watch error that neither a retry nor a re-list
// cures: forbidden, not found (the resource is not served), a bad request
// or an invalid one (a field selector the server does not support). A 410
// (resource version too old) is not: the informer re-lists.
func Final(err error) bool {
	if err == nil || Retriable(err) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return false
	}
	return apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsNotAcceptable(err) ||
		apierrors.IsUnsupportedMediaType(err)
}

// listThenWatch makes the reflector list, then watch from the list's
// resourceVersion, on every apiserver version: a streaming watch-list
// refused by an older server would look like a final error.
type listThenWatch struct{ *cache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// guard wraps lw so that onFinal hears of a list or watch error that a
// re-list cannot cure.
func guard(lw *cache.ListWatch, onFinal func(error)) *cache.ListWatch {
	check := func(err error) error {
		if Final(err) {
			onFinal(err)
		}
		return err
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := lw.ListWithContext(ctx, o)
			return l, check(err)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchWithContext(ctx, o)
			return w, check(err)
		},
	}
}

// Informer keeps a store of the objects a list-watch yields (list, then
// watch from the list's version; a broken watch re-lists) and tells its
// readers when it changes. It stops at ctx's end, or at a list or watch
// error a re-list cannot cure (Err). An Informer over several list-watches
// (InformEach: one per namespace) keeps one store each and reads as their
// union.
type Informer struct {
	parts  []informerPart
	stop   context.CancelFunc // all of them, when one fails for good
	change Signal
	mu     sync.Mutex
	err    error
}

type informerPart struct {
	store cache.Store
	ctrl  cache.Controller
}

// Inform starts an Informer over lw until ctx ends.
func Inform(ctx context.Context, lw *cache.ListWatch, obj runtime.Object) *Informer {
	return InformWhen(ctx, lw, obj, nil)
}

// InformWhen is Inform whose readers hear of an object's update only when
// matters holds for it, before or after (nil: always); an object added or
// deleted is always heard of. A drain's readers wait on the few PDBs that
// cover its pods, and its watch delivers every status update of every PDB of
// the namespace: waking them all at each one was half of a storm's CPU.
func InformWhen(ctx context.Context, lw *cache.ListWatch, obj runtime.Object, matters func(obj any) bool) *Informer {
	return InformEach(ctx, []*cache.ListWatch{lw}, obj, matters)
}

// InformEach is InformWhen over several list-watches at once (the same
// resource in several namespaces, say): one list and one watch each, the
// objects of all of them in one view, synced when all are, stopped when
// one fails for good.
func InformEach(ctx context.Context, lws []*cache.ListWatch, obj runtime.Object, matters func(obj any) bool) *Informer {
	ctx, cancel := context.WithCancel(ctx)
	in := &Informer{stop: cancel}
	changed := func(any) { in.change.Broadcast() }
	updated := func(old, o any) {
		if matters == nil || matters(old) || matters(o) {
			in.change.Broadcast()
		}
	}
	for _, lw := range lws {
		store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: listThenWatch{guard(lw, func(err error) {
				in.mu.Lock()
				if in.err == nil {
					in.err = err
				}
				in.mu.Unlock()
				cancel()
				in.change.Broadcast()
			})},
			ObjectType: obj,
			Handler: cache.ResourceEventHandlerFuncs{
				AddFunc:    changed,
				UpdateFunc: updated,
				DeleteFunc: changed,
			},
		})
		in.parts = append(in.parts, informerPart{store, ctrl})
	}
	for _, p := range in.parts {
		go func() {
			p.ctrl.RunWithContext(ctx)
			cancel()
		}()
	}
	return in
}

// Store is what the informer last saw, for an informer over one
// list-watch (List and GetByKey read any).
func (in *Informer) Store() cache.Store { return in.parts[0].store }

// List is every object the informer last saw.
func (in *Informer) List() []any {
	if len(in.parts) == 1 {
		return in.parts[0].store.List()
	}
	var out []any
	for _, p := range in.parts {
		out = append(out, p.store.List()...)
	}
	return out
}

// GetByKey is the object of key (namespace/name) the informer last saw.
func (in *Informer) GetByKey(key string) (any, bool, error) {
	for _, p := range in.parts {
		if o, ok, err := p.store.GetByKey(key); ok || err != nil {
			return o, ok, err
		}
	}
	return nil, false, nil
}

// Synced reports whether the first list (of every list-watch) is in.
func (in *Informer) Synced() bool {
	for _, p := range in.parts {
		if !p.ctrl.HasSynced() {
			return false
		}
	}
	return true
}

// Err is the list or watch error that stopped the informer (nil: running,
// or stopped by its context).
func (in *Informer) Err() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.err
}

// Changed is closed at the next change of the store (or when the informer
// fails): take it before reading the store, then wait on it.
func (in *Informer) Changed() <-chan struct{} { return in.change.C() }

// WaitSynced waits until the informer has synced, has failed, or ctx ends;
// it reports whether it synced. It looks again on ctx's clock (WithClock).
func (in *Informer) WaitSynced(ctx context.Context) bool {
	// an empty list changes nothing in the store: it is seen by looking
	// again, first within a millisecond (a drain of a namespace without a
	// PDB waited 50 ms here), backing off to every 50 ms
	poll := time.Millisecond
	clk := Clock(ctx)
	for {
		ch := in.Changed()
		if in.Synced() {
			return true
		}
		if in.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
			return in.Synced()
		case <-ch:
		case <-clk.After(poll):
			poll = min(2*poll, 50*time.Millisecond)
		}
	}
}

// Signal wakes every waiter at once: C is closed at the next Broadcast.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// C is closed at the next Broadcast.
func (s *Signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Broadcast wakes those waiting on C.
func (s *Signal) Broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
