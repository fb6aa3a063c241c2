package cluster

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
)

// Retry pauses on the context's clock: a fake clock that does not move
// holds the retry; stepped, it lets the retry go.
func TestRetryPausesOnTheContextsClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(WithClock(t.Context(), clk), 10*time.Second)
	defer cancel()
	calls := make(chan int, 2)
	n := 0
	done := make(chan error, 1)
	go func() {
		done <- Retry(ctx, func() error {
			n++
			calls <- n
			if n == 1 {
				return apierrors.NewInternalError(context.DeadlineExceeded)
			}
			return nil
		})
	}()
	<-calls
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-calls:
		t.Fatal("retried before the clock moved")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(10 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if n != 2 {
		t.Errorf("%d calls, want 2", n)
	}
}

// Without a clock in the context, Clock is the real one.
func TestClockDefaultsToReal(t *testing.T) {
	if d := time.Since(Clock(context.Background()).Now()); d < 0 || d > time.Second {
		t.Errorf("default clock is %v off the real one", d)
	}
}
