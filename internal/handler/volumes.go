package handler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/node-drainer/node-drainer/internal/drain"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// waitVolumes waits (bounded) until the VolumeAttachments of the drained
// pods' volumes are deleted, and those of any other volume on the node but
// the ones of pods that stay (DaemonSets, mirror pods): a continuation does
// not know the pods an earlier attempt evicted. Then the next node attaches
// the volumes at once.
func (r *nodeDrain) waitVolumes(ctx context.Context, n *corev1.Node, claims []string, deadline time.Time) error {
	vas, err := r.attachmentsOn(ctx, n.Name)
	if err != nil || len(vas) == 0 && len(claims) == 0 {
		return err // no volume on the node, none used by the pods: nothing to wait for
	}
	pvs, err := volume.PersistentVolumes(ctx, r.h.c.Kube, claims)
	if err != nil {
		return err
	}
	keep, err := r.claimsStaying(ctx, n.Name)
	if err != nil {
		return err
	}
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && !keep[*pv] && !slices.Contains(pvs, *pv) {
			pvs = append(pvs, *pv)
		}
	}
	if len(pvs) == 0 {
		return nil
	}
	if limit := r.h.now().Add(r.h.cfg.VolumeDetachTimeout); limit.Before(deadline) {
		deadline = limit
	}
	if budget := r.budget(ctx); budget.Before(deadline) {
		deadline = budget
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	begin := r.h.now()
	left, err := volume.WaitDetached(wctx, r.h.c.Kube, n.Name, pvs)
	if err != nil {
		what := "not detached in time"
		if !errors.Is(err, volume.ErrTimeout) {
			what = "not watched to the end (" + err.Error() + ")"
		}
		r.step(StepVolumes, "%s: %s", what, strings.Join(left, ", "))
		r.record(ctx, n, node.EventVolumesNotDetached(what, left))
		return nil // the pods are gone; the attacher finishes on its own
	}
	r.step(StepVolumes, "detached (waited %s): %s", r.h.now().Sub(begin).Round(time.Millisecond), strings.Join(pvs, ", "))
	r.recordSoon(ctx, n, node.EventVolumesDetached(r.h.now().Sub(begin), pvs))
	return nil
}

// attachmentsRead is a read of a node's VolumeAttachments begun ahead.
type attachmentsRead struct {
	done chan struct{}
	vas  []storagev1.VolumeAttachment
	err  error
}

// readAttachmentsSoon begins reading the node's VolumeAttachments in the
// background: the drain calls it as it lists the node's pods again, its
// pods gone (drain.Options.AfterGone), so the two reads overlap. The last
// one begun is the one waitVolumes takes.
func (r *nodeDrain) readAttachmentsSoon(ctx context.Context, nodeName string) {
	a := &attachmentsRead{done: make(chan struct{})}
	r.attachments = a
	r.recording.Go(func() {
		defer close(a.done)
		a.vas, a.err = volume.Attachments(ctx, r.h.c.Kube, nodeName, nil)
	})
}

// attachmentsOn is the node's VolumeAttachments: the read begun as its pods
// went, or, without one (or when it failed: its context was the drain's,
// which may have ended), one made now.
func (r *nodeDrain) attachmentsOn(ctx context.Context, nodeName string) ([]storagev1.VolumeAttachment, error) {
	if a := r.attachments; a != nil {
		r.attachments = nil
		select {
		case <-a.done:
			if a.err == nil {
				return a.vas, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return volume.Attachments(ctx, r.h.c.Kube, nodeName, nil)
}

// claimsStaying returns the PVs used by pods that stay on the node.
func (r *nodeDrain) claimsStaying(ctx context.Context, nodeName string) (map[string]bool, error) {
	pods, err := drain.PodsOn(ctx, r.h.c.Kube, nodeName)
	if err != nil {
		return nil, err
	}
	var claims []string
	for _, p := range pods {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claims = append(claims, p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	pvs, err := volume.PersistentVolumes(ctx, r.h.c.Kube, claims)
	keep := map[string]bool{}
	for _, pv := range pvs {
		keep[pv] = true
	}
	return keep, err
}
