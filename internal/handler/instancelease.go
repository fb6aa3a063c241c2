package handler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/lease"
)

// isDuplicate says that claim found the instance held, or its action done,
// by another invocation: nothing to do here.
func isDuplicate(err error) bool {
	return errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrDone)
}

// claim takes the lease of that name so that one invocation acts on the
// instance, working on key (the hook's token, the advisory event's id). It
// fails with lease.ErrHeld or lease.ErrDone when another invocation holds
// it or finished key (r.out says so: see isDuplicate). Without leases at
// all (the namespace missing, or not granted) it goes on, and says so in
// the log: duplicates are then only idempotent. An apiserver that does not
// answer in time is no such case: the error is returned, and nothing is
// done without the lease (rule 16).
func (r *invocation) claim(ctx context.Context, name, key string, deadline time.Time) (*lease.Claim, error) {
	if r.h.cfg.DryRun {
		return nil, nil
	}
	// an apiserver that does not answer is waited for no longer than the
	// drain itself would be
	limit := r.budget(ctx)
	if deadline.Before(limit) {
		limit = deadline
	}
	ctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	var cl *lease.Claim
	err := cluster.Retry(ctx, func() (err error) {
		cl, err = lease.AcquireFrom(ctx, r.h.c.Kube, r.h.cfg.LeaseNamespace, name, r.holder(ctx), r.predecessors, key, r.h.clock)
		return err
	})
	switch {
	case err == nil:
		return cl, nil
	case isDuplicate(err):
		r.out.Action, r.out.Detail = ActionIgnored, "duplicate: "+err.Error()
		return nil, err
	case errors.Is(err, lease.ErrUnavailable):
		r.log.WarnContext(ctx, "acting without a lease: duplicates of this event are not excluded", "error", err)
		return nil, nil
	default:
		r.fail(&Failure{Kind: ErrNoLease, Cause: err})
		return nil, fmt.Errorf("taking lease %s: %w", name, err)
	}
}

// holder names this invocation in leases: the Lambda request id.
func (r *invocation) holder(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		return lc.AwsRequestID
	}
	return fmt.Sprintf("pid-%d-%d", os.Getpid(), r.started.UnixNano())
}

// giveUpLease gives claim up, recording doneKey as done when it is not
// empty, even when ctx has ended: bounded on its own (leaseReleaseLimit),
// never past the invocation's deadline (Lambda would time the invocation
// out and retry its event). With no time left it is not tried: the lease
// lapses on its own.
func (r *invocation) giveUpLease(ctx context.Context, claim *lease.Claim, doneKey string) {
	bound := leaseReleaseLimit
	if !r.deadline.IsZero() {
		bound = min(bound, time.Until(r.deadline)-leaseReleaseReserve)
	}
	if bound <= 0 {
		r.log.WarnContext(ctx, "no time left to give the lease up: it lapses on its own")
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	if err := claim.Release(rctx, doneKey); err != nil {
		r.log.WarnContext(ctx, "could not give the lease up", "error", err)
	}
}

// leaseReleaseLimit bounds giveUpLease; leaseReleaseReserve is what it
// leaves of the invocation's time, for the answer to Lambda.
const (
	leaseReleaseLimit   = 5 * time.Second
	leaseReleaseReserve = 50 * time.Millisecond
)
