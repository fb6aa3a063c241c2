package cluster

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"
)

// Pager is client-go's ListPager over fn, pageSize items a request, that
// holds one page at a time: the next page is fetched while the current one
// is processed, never more (client-go's default buffers ten).
func Pager(fn pager.ListPageFunc, pageSize int64) *pager.ListPager {
	p := pager.New(fn)
	p.PageSize = pageSize
	p.PageBufferSize = 0
	return p
}

// errStop ends EachItem early without an error.
var errStop = errors.New("stop")

// EachItem lists with opts page by page (Pager) and calls fn with every
// item, as a consistent read unless opts says otherwise; fn returning
// stop=true ends the list there (the pages after are not asked for).
// Nothing of a page outlives fn unless fn keeps it.
func EachItem(ctx context.Context, fn pager.ListPageFunc, pageSize int64, opts metav1.ListOptions, each func(runtime.Object) (stop bool, err error)) error {
	err := Pager(fn, pageSize).EachListItem(ctx, opts, func(o runtime.Object) error {
		stop, err := each(o)
		if err == nil && stop {
			return errStop
		}
		return err
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// RetriableList is Retriable, or a continuation that expired between two
// pages (410): the list is made again from its first page.
func RetriableList(err error) bool {
	return Retriable(err) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}
