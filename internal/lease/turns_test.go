package lease

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// Drains count, on a shared PDB, the waiting pods of the drains that
// announced theirs before them: not their own, not later drains' (even one
// that took its lease first), not those done, not those of a lease released
// or gone stale.
func TestTurnsCountTheDrainsBefore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := newClient()
	t0 := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	acquire := func(id string, at time.Duration) *Claim {
		clk.SetTime(t0.Add(at))
		cl, err := Acquire(ctx, c, ns, Name(id), "req-"+id, "token-"+id, clk)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	early := acquire("i-9", 0) // announces last
	first, second := acquire("i-1", time.Second), acquire("i-2", 2*time.Second)
	mine, tie := acquire("i-3", 3*time.Second), acquire("i-0", 3*time.Second)
	later := acquire("i-4", 4*time.Second)
	turns := NewTurns(mine)
	if _, ok := turns.Ahead("apps/web", func(string) bool { return false }); ok {
		t.Fatal("Ahead known before this drain announced and watched the leases")
	}
	for _, a := range []struct {
		at     time.Duration
		turns  *Turns
		shared map[string][]string
	}{
		{time.Second, NewTurns(first), map[string][]string{"apps/web": {"web-1"}, "apps/api": {"api-1"}}},
		{2 * time.Second, NewTurns(second), map[string][]string{"apps/web": {"web-2", "web-3"}}},
		// two drains that announced at the same time: by name
		{3 * time.Second, NewTurns(tie), map[string][]string{"apps/web": {"web-0"}}},
		{3 * time.Second, turns, map[string][]string{"apps/web": {"web-5"}}},
		{4 * time.Second, NewTurns(later), map[string][]string{"apps/web": {"web-4"}}},
		{5 * time.Second, NewTurns(early), map[string][]string{"apps/web": {"web-9"}}},
	} {
		clk.SetTime(t0.Add(a.at))
		if err := a.turns.Announce(ctx, a.shared); err != nil {
			t.Fatal(err)
		}
	}
	// a later tier's announcement keeps the drain's place
	clk.SetTime(t0.Add(6 * time.Second))
	if err := turns.Announce(ctx, map[string][]string{"apps/web": {"web-5"}, "apps/api": {"api-5"}}); err != nil {
		t.Fatal(err)
	}
	none := func(string) bool { return false }
	ahead := func(pdb string, done func(string) bool) int {
		t.Helper()
		n, ok := turns.Ahead(pdb, done)
		if !ok {
			t.Fatal("Ahead unknown after the announcement")
		}
		return n
	}
	if n := ahead("apps/web", none); n != 4 {
		t.Fatalf("ahead on apps/web: %d, want 4 (web-1, web-2, web-3, web-0)", n)
	}
	if n := ahead("apps/web", sets.New("web-2", "web-0").Has); n != 2 {
		t.Fatalf("ahead with web-2 and web-0 done: %d, want 2", n)
	}
	if n := ahead("apps/api", none); n != 1 {
		t.Fatalf("ahead on apps/api: %d, want 1", n)
	}
	if n := ahead("apps/other", none); n != 0 {
		t.Fatalf("ahead on a PDB no drain announced: %d, want 0", n)
	}
	// the first drain ends: its announcement goes with its lease
	ch := turns.Changed()
	if err := first.Release(ctx, "token-i-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("the release of a lease did not wake the waiters")
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return ahead("apps/web", none) == 3, nil
	}); err != nil {
		t.Fatalf("ahead after the first drain released its lease: %d, want 3", ahead("apps/web", none))
	}
	// the second stops renewing (it took its lease at 2 s, the tie at 3 s):
	// once its lease is stale it counts no more
	clk.SetTime(t0.Add(3*time.Second + Duration))
	if n := ahead("apps/web", none); n != 1 {
		t.Fatalf("ahead with the second drain's lease stale: %d, want 1 (web-0)", n)
	}
}

// A peer's announcement that is not readable orders nothing, and a released
// lease keeps no announcement.
func TestTurnsIgnoreUnreadableAnnouncements(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := newClient()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	peer, err := Acquire(ctx, c, ns, Name("i-1"), "req-1", "token-1", clk)
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.update(ctx, func(l *coordinationv1.Lease) {
		l.Annotations = map[string]string{AnnotationShared: "{not json"}
	}); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(time.Second))
	mine, err := Acquire(ctx, c, ns, Name("i-2"), "req-2", "token-2", clk)
	if err != nil {
		t.Fatal(err)
	}
	turns := NewTurns(mine)
	if err := turns.Announce(ctx, map[string][]string{"apps/web": {"web-2"}}); err != nil {
		t.Fatal(err)
	}
	if n, ok := turns.Ahead("apps/web", func(string) bool { return false }); !ok || n != 0 {
		t.Fatalf("ahead behind an unreadable announcement: %d (known %v), want 0", n, ok)
	}
	if err := mine.Release(ctx, ""); err != nil {
		t.Fatal(err)
	}
	l, err := c.CoordinationV1().Leases(ns).Get(ctx, Name("i-2"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := l.Annotations[AnnotationShared]; ok {
		t.Fatalf("the released lease still announces %s", a)
	}
}
