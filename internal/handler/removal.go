package handler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/node-drainer/node-drainer/internal/discovery"
)

// An uninstall removes the hooks the deployment put (stackhooks.go); a
// sweep running at that moment, or queued, or retried by Lambda after it,
// would put them back on the tagged groups, where they outlive the
// function and hold every scale-in for their heartbeat timeout. So the
// removal first marks the function itself (a tag, removalTag), and the
// sweep reads the mark at the moment of putting: before, where a mark or a
// function gone puts nothing, and again after it has put, where it takes
// back what it put. Whichever order the two run in, no hook of the
// deployment's is left: a hook put before the removal read the groups is
// the removal's to take; one put after has the mark read after it. A
// create or update of the deployment (installed again after a removal
// that failed) takes the mark off.

// SelfAPI is the part of Lambda the function reads and marks itself with.
type SelfAPI interface {
	GetFunction(ctx context.Context, in *lambda.GetFunctionInput, opts ...func(*lambda.Options)) (*lambda.GetFunctionOutput, error)
	TagResource(ctx context.Context, in *lambda.TagResourceInput, opts ...func(*lambda.Options)) (*lambda.TagResourceOutput, error)
	UntagResource(ctx context.Context, in *lambda.UntagResourceInput, opts ...func(*lambda.Options)) (*lambda.UntagResourceOutput, error)
}

// removalTag is the function's tag that marks its deployment's removal
// begun (its value: when).
const removalTag = "node-drainer:removing"

// self reads the function's own configuration and tags; gone: Lambda has
// no such function (deleted). nil, false, nil: no client or no name (not
// in Lambda): nothing to read.
func (h *Handler) self(ctx context.Context) (out *lambda.GetFunctionOutput, gone bool, err error) {
	if h.c.Self == nil || h.cfg.FunctionName == "" {
		return nil, false, nil
	}
	out, err = h.c.Self.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(h.cfg.FunctionName)})
	var nf *lambdatypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the function's removal mark: %w", err)
	}
	return out, false, nil
}

// removing reads now whether the deployment's removal has begun: the
// function marked, or gone.
func (h *Handler) removing(ctx context.Context) (bool, error) {
	out, gone, err := h.self(ctx)
	if err != nil || gone || out == nil {
		return gone, err
	}
	_, marked := out.Tags[removalTag]
	return marked, nil
}

// markRemoval puts the removal's mark on the function (on), or takes it off.
func (h *Handler) markRemoval(ctx context.Context, on bool) error {
	out, _, err := h.self(ctx)
	if err != nil || out == nil || out.Configuration == nil {
		return err
	}
	arn := out.Configuration.FunctionArn
	_, marked := out.Tags[removalTag]
	switch {
	case on:
		_, err = h.c.Self.TagResource(ctx, &lambda.TagResourceInput{Resource: arn, Tags: map[string]string{removalTag: h.now().UTC().Format(time.RFC3339)}})
	case marked:
		_, err = h.c.Self.UntagResource(ctx, &lambda.UntagResourceInput{Resource: arn, TagKeys: []string{removalTag}})
	}
	if err != nil {
		return fmt.Errorf("marking the function's removal: %w", err)
	}
	return nil
}

// ensureTagged is the sweep's discovery.Ensure, the hooks marked the
// deployment's, unless its removal has begun: the mark is read before
// putting and again after, and what was put is taken back when the mark
// is there then (or cannot be read: a hook missing until the next sweep
// is repaired, one left after an uninstall is not).
func (h *Handler) ensureTagged(ctx context.Context, tag discovery.Tag, hooks []discovery.Hook, dryRun bool) (discovery.Result, error) {
	for i := range hooks {
		hooks[i].Owner = h.cfg.FunctionName
	}
	if removing, err := h.removing(ctx); err != nil || removing {
		if err == nil {
			h.log.InfoContext(ctx, "the deployment is being removed: no lifecycle hook put on tagged groups")
		}
		return discovery.Result{}, err
	}
	res, err := discovery.Ensure(ctx, h.c.Hooks, tag, hooks, dryRun)
	if len(res.Put) == 0 || dryRun {
		return res, err
	}
	removing, rerr := h.removing(ctx)
	if !removing && rerr == nil {
		return res, err
	}
	var groups, names []string
	for _, g := range res.Tagged {
		groups = append(groups, aws.ToString(g.AutoScalingGroupName))
	}
	for _, hk := range hooks {
		names = append(names, hk.Name)
	}
	removed, failed := discovery.Remove(ctx, h.c.Hooks, groups, names, h.cfg.FunctionName, func(string) bool { return false }, false)
	h.log.WarnContext(ctx, "the deployment's removal began while the sweep put hooks: taken back", "put", res.Put, "removed", removed, "failed", failed, "error", rerr)
	res.Put, res.Failed = nil, append(res.Failed, failed...)
	return res, errors.Join(err, rerr)
}
