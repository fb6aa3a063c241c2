package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/cluster"
)

// evict evicts one pod, retrying while a PDB refuses (429) or the apiserver
// has a transient failure, until ctx ends. A PDB that allows no disruption
// is waited on before the eviction is tried. A PDB's refusal at the end is
// ErrBlockedByPDB, a transient failure ErrTimeout; any other error is the
// API's, wrapped.
func (d *Drainer) evict(ctx context.Context, r *run, p corev1.Pod, grace time.Duration) (evictErr error) {
	e := &eviction{d: d, r: r, p: p, grace: grace,
		// a wait.Backoff only computes the pauses; they are waited on the clock
		backoff:  wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: d.opts.RetryCap},
		refusals: cluster.Backoff(), // up to 5 s apart: a policy changes on a person's time
	}
	if d.opts.OnPDBWait != nil {
		defer func() {
			if !e.held.IsZero() {
				d.opts.OnPDBWait(Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}, r.blockers(p), d.opts.Clock.Since(e.held), evictErr == nil)
			}
		}()
	}
	for {
		done, err := e.try(ctx)
		if done {
			return err
		}
		if ctx.Err() != nil {
			return e.ended(ctx, err)
		}
	}
}

// eviction is one pod's eviction, asked again until it is accepted, the
// pod is gone, or the drain's time ends: the pauses between the tries, and
// what was said of its refusals.
type eviction struct {
	d        *Drainer
	r        *run
	p        corev1.Pod
	grace    time.Duration
	backoff  wait.Backoff // between tries after a transient failure or a PDB's refusal
	refusals wait.Backoff // between tries after an admission refusal
	// logged: the PDBs holding the pod were named in the log (once);
	// saidRefused: an admission refusal was (once)
	logged, saidRefused bool
	held                time.Time // when a PDB first held the pod
}

// try asks once. done: the eviction ended, with err (nil: accepted, or the
// pod gone). Otherwise err is the refusal it has waited past, and it is
// asked again.
func (e *eviction) try(ctx context.Context) (done bool, err error) {
	asked := e.d.opts.Clock.Now()
	tk, err := e.r.admit(ctx, e.p, &e.logged)
	if e.logged && e.held.IsZero() {
		e.held = asked // admit waited on a PDB that allowed no disruption
	}
	if errors.Is(err, errGone) {
		return e.accepted() // gone all the same: the drain counts it so
	}
	if err != nil {
		return true, err
	}
	err = e.d.evictPod(ctx, e.p, e.grace)
	e.r.release(tk, err != nil)
	e.noteHeld(ctx, err)
	return e.answer(ctx, err)
}

// noteHeld names the PDBs holding the pod in the log, the first time one
// refuses it.
func (e *eviction) noteHeld(ctx context.Context, err error) {
	if e.logged || !(apierrors.IsTooManyRequests(err) || isMultiplePDBs(err)) {
		return
	}
	e.logged = true
	e.held = e.d.opts.Clock.Now()
	cluster.Logger(ctx).InfoContext(ctx, "eviction refused by PodDisruptionBudget", "pod", e.p.Namespace+"/"+e.p.Name,
		"pdbs", e.r.blockers(e.p), "message", pdbMessage(err))
}

// answer acts on the eviction's answer: done, or waited on and asked again.
func (e *eviction) answer(ctx context.Context, err error) (bool, error) {
	switch {
	case err == nil:
		// told after the eviction was accepted, and it must not block: the
		// drain's calls are bounded by the hand-over's moment (rule 16)
		if e.d.opts.OnEvicted != nil {
			e.d.opts.OnEvicted(Pod{Namespace: e.p.Namespace, Name: e.p.Name, UID: e.p.UID})
		}
		return e.accepted()
	case apierrors.IsNotFound(err):
		return e.accepted()
	case apierrors.IsConflict(err):
		return e.conflicted(ctx, err)
	case apierrors.IsTooManyRequests(err):
		// a PDB holds it (or the apiserver's priority and fairness
		// throttles): wait until a PDB covering it changes, paced and no
		// sooner than the server's Retry-After
		return e.waitPDB(ctx, err, pdbMessage(err))
	case apierrors.IsForbidden(err) && isNamespaceTerminating(err):
		return e.deleteInTerminatingNamespace(ctx)
	case isMultiplePDBs(err):
		return e.multiplePDBs(ctx, err)
	case cluster.Retriable(err):
		cluster.ObserveRetry(ctx, err)
		select {
		case <-ctx.Done():
			return true, timedOut{fmt.Errorf("evicting: %w", err)}
		case <-e.d.opts.Clock.After(cluster.Pause(&e.backoff, err)):
			return false, err
		}
	case ctx.Err() != nil:
		return true, timedOut{fmt.Errorf("evicting: %w", err)} // the call ended with the drain
	case refused(err):
		return e.refused(ctx, err)
	}
	return true, fmt.Errorf("evicting: %w", err)
}

// accepted: the eviction was accepted, or the pod is gone.
func (e *eviction) accepted() (bool, error) {
	e.r.set(e.p.UID, stateAccepted, nil)
	return true, nil
}

// conflicted acts on a 409. It is one of two things (1.35's eviction
// handler, pkg/registry/core/pod/storage/eviction.go): the UID precondition
// failed (the pod we meant is gone, one of the same name, a StatefulSet's
// replacement, is not ours), or the PDB's status write lost 20 tries 500 ms
// apart to other writers (contention: the pod is still ours and still
// there). Only a fresh read tells them apart; still there (or the read
// failed: the next eviction asks again), it is waited on as a 429.
func (e *eviction) conflicted(ctx context.Context, err error) (bool, error) {
	if there, rerr := e.d.stillThere(ctx, e.p); rerr == nil && !there {
		return e.accepted()
	}
	return e.waitPDB(ctx, err, "eviction conflicted until the deadline: "+err.Error())
}

// waitPDB waits until a PDB covering the pod changes, paced; at the
// drain's deadline the eviction ends blocked, saying why.
func (e *eviction) waitPDB(ctx context.Context, err error, why string) (bool, error) {
	e.r.set(e.p.UID, stateBlocked, nil)
	if !e.r.waitPDBChange(ctx, e.p, cluster.Pause(&e.backoff, err), e.d.opts.RetryCap) {
		return true, fmt.Errorf("%w (%s): %s", ErrBlockedByPDB, e.r.blockers(e.p), why)
	}
	return false, err
}

// deleteInTerminatingNamespace does what kubectl does: eviction is refused
// in a terminating namespace; the delete names the pod's UID as the
// eviction did.
func (e *eviction) deleteInTerminatingNamespace(ctx context.Context) (bool, error) {
	err := e.d.client.CoreV1().Pods(e.p.Namespace).Delete(ctx, e.p.Name, e.d.deleteOptions(e.p, e.grace))
	if err == nil {
		e.r.set(e.p.UID, stateAccepted, nil)
	}
	return true, err
}

// multiplePDBs: the eviction API refuses a pod under two PDBs (a 500); only
// an operator can mend it. The retry is paced and the PDBs named.
func (e *eviction) multiplePDBs(ctx context.Context, err error) (bool, error) {
	e.r.set(e.p.UID, stateBlocked, nil)
	select {
	case <-ctx.Done():
		return true, fmt.Errorf("%w (%s): %s", ErrBlockedByPDB, e.r.blockers(e.p), pdbMessage(err))
	case <-e.d.opts.Clock.After(e.backoff.Step()):
		return false, err
	}
}

// refused: a policy or webhook says no for now. The pod stays, other tiers
// go on, and the eviction is asked again until the drain's deadline (an
// operator may lift the policy; a webhook may come back).
func (e *eviction) refused(ctx context.Context, err error) (bool, error) {
	e.r.set(e.p.UID, stateBlocked, nil)
	if !e.saidRefused {
		e.saidRefused = true
		cluster.Logger(ctx).WarnContext(ctx, "eviction refused by admission; asked again until the drain's deadline", "pod", e.p.Namespace+"/"+e.p.Name,
			"cause", cluster.Cause(err), "message", err.Error())
	}
	cluster.ObserveRetry(ctx, err)
	select {
	case <-ctx.Done():
		return true, fmt.Errorf("%w: %w", ErrRefused, err)
	case <-e.d.opts.Clock.After(cluster.Pause(&e.refusals, err)):
		return false, err
	}
}

// ended is why the eviction ends when ctx ended between two tries: the last
// refusal says why.
func (e *eviction) ended(ctx context.Context, err error) error {
	switch {
	case apierrors.IsTooManyRequests(err), isMultiplePDBs(err), apierrors.IsConflict(err):
		return fmt.Errorf("%w (%s): %s", ErrBlockedByPDB, e.r.blockers(e.p), pdbMessage(err))
	case refused(err):
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return timedOut{fmt.Errorf("evicting: %w", ctx.Err())}
}
