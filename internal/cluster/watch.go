package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
	check := func(err error) error {
		if Final(err) {
			mu.Lock()
			if final == nil {
				final = err
			}
			mu.Unlock()
			cancel()
		}
		return err
	}
	guarded := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := lw.ListWithContext(ctx, o)
			return l, check(err)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchWithContext(ctx, o)
			return w, check(err)
		},
	}
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
