package handler

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/sweep"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// deleteOrphan deletes an attachment to a node the cluster no longer has,
// whose instance EC2 reported terminated or gone. The reading is up to a
// whole sweep old: both are read again at the moment of acting (safety rule
// 11) — the node is still missing, and EC2 still reports every instance of
// that name down (sweep.Orphan.ReadAgain); an EC2 that cannot be read now
// is an error, and nothing is done. It returns why the attachment was kept
// ("" when it was deleted, or would be in a dry run).
func (r *sweeper) deleteOrphan(ctx context.Context, o sweep.Orphan) (kept string, err error) {
	va := o.Attachment
	if _, err := node.Get(ctx, r.h.c.Kube, va.Spec.NodeName); err == nil {
		return "the node is back", nil
	} else if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("reading node %s again: %w", va.Spec.NodeName, err)
	}
	orphaned, evidence, err := o.ReadAgain(ctx, r.h.c.EC2, r.h.clock)
	if err != nil {
		return "", fmt.Errorf("reading EC2 again before deleting volume attachment %s: %w", va.Name, err)
	}
	if !orphaned {
		return evidence + " (read again before deleting)", nil
	}
	if r.h.cfg.DryRun {
		return "", nil
	}
	if err := volume.DeleteAttachment(ctx, r.h.c.Kube, &va); err != nil {
		return "", err
	}
	r.log.InfoContext(ctx, "deleted orphaned volume attachment", "attachment", va.Name, "node", va.Spec.NodeName,
		"volume", ptr.Deref(va.Spec.Source.PersistentVolumeName, ""), "evidence", "node not in the cluster (read again); "+evidence)
	return "", nil
}

// zombie reports a node NotReady on a running instance, and marks the
// instance Unhealthy in its ASG when the plan says so — after reading again
// that the node is still NotReady and EC2 still reports it running. The
// function never stops or terminates an instance itself: its ASG replaces
// it, through the terminate hook and this function's drain.
func (r *sweeper) zombie(ctx context.Context, z sweep.Zombie) (bool, error) {
	log := r.log.With("node", z.Node, "instance", z.InstanceID, "asg", z.ASG)
	n, err := node.Get(ctx, r.h.c.Kube, z.Node)
	if err != nil {
		return false, fmt.Errorf("reading node %s: %w", z.Node, err)
	}
	if node.Ready(n) {
		return false, nil // back since the reading
	}
	if !z.Replace {
		log.WarnContext(ctx, "zombie node", "since", z.Since, "action", z.Why)
		r.record(ctx, n, node.EventZombie(z.Since, z.InstanceID, z.Why))
		return false, nil
	}
	inst, err := instance.Describe(ctx, r.h.c.EC2, r.h.clock, z.InstanceID)
	if err != nil {
		return false, err
	}
	if !inst.Found || inst.State != instance.StateRunning {
		return false, nil // not a zombie any more: the abrupt path is the next sweep's
	}
	if held, err := r.zombieHeld(ctx, z.Node); err != nil || len(held) > 0 {
		if err == nil { // POD_POLICY=honor: a replacement is voluntary
			log.WarnContext(ctx, "zombie node: not replaced, pods on it ask not to be disrupted (POD_POLICY=honor)", "since", z.Since, "pods", held)
			r.record(ctx, n, node.EventZombie(z.Since, z.InstanceID, "not replaced: "+strings.Join(held, "; ")))
		}
		return false, err
	}
	if r.h.cfg.DryRun {
		log.WarnContext(ctx, "zombie node: would mark its instance Unhealthy (dry run)", "since", z.Since)
		return false, nil
	}
	if _, err := r.h.c.AutoScaling.SetInstanceHealth(ctx, &autoscaling.SetInstanceHealthInput{
		InstanceId: aws.String(z.InstanceID), HealthStatus: aws.String("Unhealthy"), ShouldRespectGracePeriod: aws.Bool(true),
	}); err != nil {
		return false, fmt.Errorf("marking instance %s Unhealthy: %w", z.InstanceID, err)
	}
	log.WarnContext(ctx, "zombie node: instance marked Unhealthy for its ASG to replace", "since", z.Since, "evidence", inst.String())
	r.record(ctx, n, node.EventZombieReplaced(z.Since, z.InstanceID, z.ASG))
	return true, nil
}
