package clustertest

import (
	"context"
	"log/slog"
	"sync"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// BubbleErrorHandlers replaces apimachinery's error handlers
// (utilruntime.ErrorHandlers, which a reflector calls on each failed list
// or watch) with one that logs the error and never sleeps. A package whose
// tests run reflectors (informers, watchtools.UntilWithSync) in
// testing/synctest bubbles needs it before its first bubble: Bubble calls
// it, or call it from an init function.
//
// The handlers' rate limit keeps the time of the last error in a variable
// shared by the whole process (a mutex shared with every goroutine outside
// the bubble too), set at init in real time, while a bubble's clock starts
// in 2000: the first error in a bubble sleeps until that time, a quarter of
// a century of the bubble's clock. The bubble jumps there at once, every
// deadline in it expires, and the test sees timeouts that never happened
// (a 403 "retried for 235966h"). test/sim does the same for its seeds.
// It replaces them once, however often it is called.
func BubbleErrorHandlers() { bubbleErrorHandlers() }

var bubbleErrorHandlers = sync.OnceFunc(func() {
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{
		func(ctx context.Context, err error, msg string, keysAndValues ...any) {
			slog.Default().ErrorContext(ctx, msg, append([]any{"error", err}, keysAndValues...)...)
		},
	}
})
