package clustertest

import (
	"fmt"
	"runtime/debug"
	"testing"
	"testing/synctest"
	"time"
)

// Watchdog is the real time a Bubble may run. A bubble's clock moves only
// when every goroutine in it waits durably (a sleep, a timer, a channel of
// the bubble): one that spins (a retry loop that never waits) or waits on a
// mutex held by a goroutine asleep in the bubble (a reactor of the fake
// clientset that sleeps: see Outside) keeps the clock still for good, and
// the test would hang until the binary's timeout (10 minutes in make unit)
// with no word of which bubble it was.
var Watchdog = 2 * time.Minute

// Bubble runs f in a testing/synctest bubble, as synctest.Test does, with
// apimachinery's error handlers made safe for bubbles (BubbleErrorHandlers)
// and a watchdog outside it: past Watchdog of real time the test binary
// panics, naming the test, with every goroutine's stack.
func Bubble(t *testing.T, f func(*testing.T)) {
	t.Helper()
	BubbleErrorHandlers()
	name := t.Name()
	dog := time.AfterFunc(Watchdog, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("%s: its synctest bubble ran %s of real time: a goroutine in it never waits, "+
			"or waits on a mutex held by one asleep in the bubble (a reactor that sleeps?), so the bubble's clock stopped", name, Watchdog))
	})
	defer dog.Stop()
	synctest.Test(t, f)
}

// InBubble is Bubble as a subtest's function: t.Run(name, InBubble(...)).
func InBubble(f func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) {
		t.Helper()
		Bubble(t, f)
	}
}
