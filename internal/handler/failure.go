package handler

import (
	"errors"
	"fmt"
	"strings"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

// The failures an Outcome reports with ActionFailed. Outcome.Err returns a
// *Failure that matches one of them with errors.Is, and unwraps to its
// cause.
var (
	// ErrDrainFailed: the drain's deadline (DRAIN_TIMEOUT, or the last
	// continuation's budget) passed; the hook was completed with the failure
	// result. Its cause is the drain's last error (none: pods remained).
	ErrDrainFailed = errors.New("drain failed until the deadline")
	// ErrHandOver: the continuation could not be invoked; the hook is left
	// for Lambda's retry of the invocation.
	ErrHandOver = errors.New("could not hand over")
	// ErrNoLease: the instance's lease could not be taken; nothing was
	// changed.
	ErrNoLease = errors.New("the instance's lease could not be taken")
	// ErrNotReady: a launching instance's node was not Ready by the
	// deadline, or could not be watched to the end (its cause says why).
	ErrNotReady = errors.New("node did not become Ready before the deadline")
	// ErrFanOut: some of the per-instance invocations of a scheduled change,
	// or of a Capacity Block, could not be sent.
	ErrFanOut = errors.New("could not invoke the function for every instance")
	// ErrSweepRead: the sweep could not read everything; nothing was changed.
	ErrSweepRead = errors.New("sweep read nothing complete")
)

// Failure is why an invocation failed: Kind, one of the Err values above,
// and the error that caused it.
type Failure struct {
	Kind  error
	Cause error // nil: none (a drain whose pods remained)
	// Result is the result the hook was completed with (ErrDrainFailed).
	Result lifecycle.Result
}

// Error is the failure as the Outcome's Detail says it.
func (f *Failure) Error() string {
	c := f.Cause
	switch {
	case f.Kind == ErrDrainFailed && c == nil:
		return "drain timed out; lifecycle action completed with " + string(f.Result)
	case f.Kind == ErrDrainFailed:
		return fmt.Sprintf("drain failed until the deadline (last error, %s): %v", cluster.Cause(c), c)
	case f.Kind == ErrHandOver:
		return "could not hand over (the hook is left as it is, for Lambda's retry of this invocation): " + c.Error()
	case f.Kind == ErrNoLease:
		return "the instance's lease could not be taken (" + cluster.Cause(c) + "); nothing was changed, a retry takes it: " + c.Error()
	case f.Kind == ErrNotReady && (c == nil || errors.Is(c, cluster.ErrWaitTimeout)):
		return ErrNotReady.Error()
	case f.Kind == ErrNotReady:
		return fmt.Sprintf("node not watched to the end (%s): %v", cluster.Cause(c), c)
	case f.Kind == ErrSweepRead:
		return "sweep read nothing complete; nothing was changed: " + c.Error()
	case c == nil:
		return f.Kind.Error()
	}
	return c.Error() // ErrFanOut: the invocations that failed
}

// Is makes the failure match its Kind.
func (f *Failure) Is(target error) bool { return target == f.Kind }

// Unwrap is the failure's cause.
func (f *Failure) Unwrap() error { return f.Cause }

// detail is the Outcome's Detail once f happened, what it said before being
// prior: the one place a failure becomes text.
func (f *Failure) detail(prior string) string {
	switch f.Kind {
	case ErrNoLease, ErrNotReady, ErrSweepRead:
		return f.Error() // nothing else was done
	case ErrFanOut:
		return prior + "; " + f.Error() // prior lists the invocations sent
	}
	if f.Kind == ErrDrainFailed && f.Cause == nil && prior != "" {
		return prior // it says why the pods remained
	}
	return strings.TrimSpace(prior + " " + f.Error())
}

// fail ends the run as failed with f: the outcome's action, its detail and
// its error (Outcome.Err).
func (r *invocation) fail(f *Failure) {
	r.out.Action = ActionFailed
	r.out.Detail = f.detail(r.out.Detail)
	r.out.err = f
}

// Err is why the invocation failed (a *Failure, Action ActionFailed), or
// why nothing was forced (an error matching ErrNotSafe, Action
// ActionNotForced); nil otherwise.
func (o Outcome) Err() error {
	if o.err == nil || (o.Action != ActionFailed && o.Action != ActionNotForced) {
		return nil // a later step took the outcome elsewhere
	}
	return o.err
}
