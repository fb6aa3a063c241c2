package handler

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/node-drainer/node-drainer/internal/lease"
)

// The lease is given up within the invocation's time, never past its
// deadline (issue 54, S8: Lambda would time the invocation out and retry
// its event): with no time left it is not tried, and lapses on its own.
func TestLeaseGivenUpWithinTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		left     time.Duration // to the invocation's deadline (0: none)
		released bool
	}{
		{"time left", time.Minute, true},
		{"no deadline", 0, true},
		{"deadline passed", -time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			cl, err := lease.Acquire(context.Background(), kube, "kube-system", lease.Name(idA), "me", "tok", clock.RealClock{})
			if err != nil {
				t.Fatal(err)
			}
			r := &invocation{log: slog.New(slog.DiscardHandler)}
			if tc.left != 0 {
				r.deadline = time.Now().Add(tc.left)
			}
			before := len(kube.Actions())
			r.giveUpLease(context.Background(), cl, "tok")
			if got := len(kube.Actions()) > before; got != tc.released {
				t.Errorf("lease calls made: %v (%v), want %v", got, kube.Actions()[before:], tc.released)
			}
		})
	}
}
