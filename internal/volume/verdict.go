package volume

import (
	"context"
	"time"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// GuardFresh is how long a guard's verdict holds (safety rule 11: read
// again at the moment of acting). A forced step tried later than that after
// the guard last passed (a retry after the apiserver failed it, a delete
// behind a read that was retried for seconds) asks the guard again first:
// an instance EC2 reported stopped may be pending a few seconds later,
// started again.
const GuardFresh = time.Second

// Verdict is a guard's last answer and when it gave it. The guard's
// answer holds as of its return: a guard reads its evidence again when a
// slow read would make it older than that.
type Verdict struct {
	guard func(context.Context) error
	// turn is held while the guard is asked (a channel, not a mutex: a
	// caller waits for its turn or its context, whichever ends first)
	turn chan struct{}
	at   time.Time // when the guard last passed (zero: never asked)
	no   error     // the guard's objection: it stands for the rest of the release
}

// NewVerdict keeps guard's answers (nil: a guard that always passes).
func NewVerdict(guard func(context.Context) error) *Verdict {
	if guard == nil {
		guard = func(context.Context) error { return nil }
	}
	return &Verdict{guard: guard, turn: make(chan struct{}, 1)}
}

// Check asks the guard now: before each step.
func (v *Verdict) Check(ctx context.Context) error {
	if err := v.take(ctx); err != nil {
		return err
	}
	defer v.give()
	return v.ask(ctx)
}

// Fresh asks the guard again unless it passed within GuardFresh: before
// each attempt at a forced write. Callers at once share one asking.
func (v *Verdict) Fresh(ctx context.Context) error {
	if err := v.take(ctx); err != nil {
		return err
	}
	defer v.give()
	if v.no == nil && !v.at.IsZero() && cluster.Clock(ctx).Since(v.at) < GuardFresh {
		return nil
	}
	return v.ask(ctx)
}

// objection is the guard's objection, if it made one.
func (v *Verdict) objection() error {
	if v.take(context.Background()) != nil {
		return nil
	}
	defer v.give()
	return v.no
}

func (v *Verdict) take(ctx context.Context) error {
	select {
	case v.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (v *Verdict) give() { <-v.turn }

// ask asks the guard; the caller has the turn.
func (v *Verdict) ask(ctx context.Context) error {
	if v.no != nil {
		return v.no
	}
	if err := v.guard(ctx); err != nil {
		v.no = err
		return err
	}
	v.at = cluster.Clock(ctx).Now()
	return nil
}
