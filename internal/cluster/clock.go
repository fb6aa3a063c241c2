package cluster

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

type clockKey struct{}

// WithClock returns a context whose Kubernetes retries (Retry, RetryIf) and
// informer waits (Informer.WaitSynced) read the time and wait on c: the
// handler's clock, so that a simulation drives them. Like the logger and
// the retry observer, it travels in the context because every package that
// calls the apiserver retries through here.
func WithClock(ctx context.Context, c clock.WithTicker) context.Context {
	return context.WithValue(ctx, clockKey{}, c)
}

// Clock is the clock WithClock put in ctx (the real one, if none).
func Clock(ctx context.Context) clock.WithTicker {
	if c, ok := ctx.Value(clockKey{}).(clock.WithTicker); ok && c != nil {
		return c
	}
	return clock.RealClock{}
}

// Sleep waits d on c, or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, c clock.Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
