package hooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
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
// that failed) takes the mark off; a mark older than removalMarkStale is
// no longer heeded, and is said at each sweep.

// SelfAPI is the part of Lambda the function reads and marks itself with.
// (GetFunction's tags would come without a lambda:ListTags grant as none at
// all: the mark is read with ListTags, which fails instead.)
type SelfAPI interface {
	ListTags(ctx context.Context, in *lambda.ListTagsInput, opts ...func(*lambda.Options)) (*lambda.ListTagsOutput, error)
	TagResource(ctx context.Context, in *lambda.TagResourceInput, opts ...func(*lambda.Options)) (*lambda.TagResourceOutput, error)
	UntagResource(ctx context.Context, in *lambda.UntagResourceInput, opts ...func(*lambda.Options)) (*lambda.UntagResourceOutput, error)
}

// removalTag is the function's tag that marks its deployment's removal
// begun (its value: when).
const removalTag = "node-drainer:removing"

// self reads the function's ARN and tags now; gone: Lambda has no such
// function (deleted). arn nil: no client or no name (not in Lambda):
// nothing to read.
func (k *Keeper) self(ctx context.Context) (arn *string, tags map[string]string, gone bool, err error) {
	if k.c.Self == nil || k.cfg.FunctionName == "" {
		return nil, nil, false, nil
	}
	arn, err = k.selfARN(ctx)
	var out *lambda.ListTagsOutput
	if err == nil {
		out, err = k.c.Self.ListTags(ctx, &lambda.ListTagsInput{Resource: arn})
	}
	var nf *lambdatypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil, nil, true, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("reading the function's removal mark: %w", err)
	}
	return arn, out.Tags, false, nil
}

// selfARN is the function's unqualified ARN: the invocation's, less its
// version or alias. Lambda gives it to every invocation (the runtime API's
// Lambda-Runtime-Invoked-Function-Arn), so it is never asked for
// (lambda:GetFunctionConfiguration is not granted); without one the
// function is not running in Lambda, and the mark is unread.
func (k *Keeper) selfARN(ctx context.Context) (*string, error) {
	if lc, ok := lambdacontext.FromContext(ctx); ok && strings.HasPrefix(lc.InvokedFunctionArn, "arn:") {
		if parts := strings.Split(lc.InvokedFunctionArn, ":"); len(parts) >= 7 {
			return aws.String(strings.Join(parts[:7], ":")), nil
		}
	}
	return nil, errors.New("the invocation carries no function ARN (not invoked by Lambda)")
}

// removalMarkStale is the age past which a removal's mark was left by a
// removal that failed or was abandoned (a terraform destroy that failed,
// then an apply, which does not invoke the unchanged hooks resource
// again): one removal is one invocation, at most Lambda's 15 minutes, and
// each marks anew when it begins. No removal runs under such a mark, and
// the sweep no longer heeds it: else it would put no hook, ever, on the
// groups the failed removal stripped nor on those tagged since.
const removalMarkStale = 30 * time.Minute

// Removal is what Lambda says, read now, of the deployment's removal.
type Removal struct {
	arn    string // the function's (for the note)
	gone   bool   // no such function: deleted
	marked bool   // the function carries removalTag
	since  string // its value
	stale  bool   // the mark older than removalMarkStale, or of no time
}

// removing reports whether the deployment's removal has begun and may
// still run: the function gone, or marked not long ago.
func (st Removal) removing() bool { return st.gone || (st.marked && !st.stale) }

// Note says the state in the sweep's summary ("" nothing to say).
func (st Removal) Note() string {
	switch {
	case st.gone:
		return "the function no longer exists (removed): no hook put on tagged groups"
	case !st.marked:
		return ""
	case !st.stale:
		return "the function carries the removal mark " + removalTag + " (since " + st.since + "): its deployment is being removed, no hook put on tagged groups"
	}
	return fmt.Sprintf("the function carries the removal mark %s since %q, older than %s: left by a removal that failed or was abandoned, none runs under it, "+
		"so hooks are put on tagged groups as usual; remove the deployment again, or take the mark off: aws lambda untag-resource --resource %s --tag-keys %s",
		removalTag, st.since, removalMarkStale, st.arn, removalTag)
}

// Marked is the removal mark found on the function, as the sweep's summary
// says it: its value, since when ("(no time)": none); "" no mark.
func (st Removal) Marked() string {
	switch {
	case !st.marked:
		return ""
	case st.since == "":
		return "(no time)"
	}
	return st.since
}

// removal reads now what Lambda says of the deployment's removal.
func (k *Keeper) removal(ctx context.Context) (Removal, error) {
	arn, tags, gone, err := k.self(ctx)
	st := Removal{arn: aws.ToString(arn), gone: gone}
	st.since, st.marked = tags[removalTag]
	if st.marked {
		at, perr := time.Parse(time.RFC3339, st.since)
		st.stale = perr != nil || k.now().Sub(at) > removalMarkStale
	}
	return st, err
}

// markRemoval puts the removal's mark on the function (on), or takes it off.
func (k *Keeper) markRemoval(ctx context.Context, on bool) error {
	arn, tags, _, err := k.self(ctx)
	if err != nil || arn == nil {
		return err
	}
	_, marked := tags[removalTag]
	switch {
	case on:
		_, err = k.c.Self.TagResource(ctx, &lambda.TagResourceInput{Resource: arn, Tags: map[string]string{removalTag: k.now().UTC().Format(time.RFC3339)}})
	case marked:
		_, err = k.c.Self.UntagResource(ctx, &lambda.UntagResourceInput{Resource: arn, TagKeys: []string{removalTag}})
	}
	if err != nil {
		return fmt.Errorf("marking the function's removal: %w", err)
	}
	return nil
}

// EnsureTagged is the sweep's discovery.Ensure, the hooks marked the
// deployment's, unless its removal has begun: the mark is read before
// putting and again after, and what this sweep put is taken back when the
// mark is there then (takeBack).
//
// A second read that fails takes nothing back: it is no verdict, and a
// take-back deletes hooks, which completes every action pending under them
// (CONTINUE for a terminating instance, ABANDON for a launching one). Rule
// 17: a hook is never removed under a drain. The failure fails the sweep,
// whose retry (and the next sweep) reads the mark first: a mark then puts
// nothing, and the hooks this sweep put stay for the removal, or a destroy
// run again, to take. A hook left until then holds a scale-in for its
// heartbeat timeout; one taken back here could end a drain in flight.
func (k *Keeper) EnsureTagged(ctx context.Context, tag discovery.Tag, hooks []discovery.Hook, dryRun bool) (discovery.Result, Removal, error) {
	for i := range hooks {
		hooks[i].Owner = k.cfg.FunctionName
	}
	st, err := k.removal(ctx)
	switch {
	case err != nil:
		return discovery.Result{}, st, err
	case st.removing():
		k.log.InfoContext(ctx, "the deployment is being removed: no lifecycle hook put on tagged groups", "mark", st.since, "gone", st.gone)
		return discovery.Result{}, st, nil
	case st.marked:
		k.log.WarnContext(ctx, "a stale removal mark on the function: hooks put as usual", "mark", st.since, "note", st.Note())
	}
	res, err := discovery.Ensure(ctx, k.c.Hooks, tag, hooks, dryRun)
	if len(res.Put) == 0 || dryRun {
		return res, st, err
	}
	again, rerr := k.removal(ctx)
	if rerr != nil {
		k.log.WarnContext(ctx, "the removal mark unreadable after putting hooks: none taken back (rule 17), the next sweep reads it again", "put", res.Put, "error", rerr)
		return res, st, errors.Join(err, fmt.Errorf("%w: the hooks just put (%s) kept", rerr, strings.Join(res.Put, ", ")))
	}
	if !again.removing() {
		return res, again, err
	}
	removed, failed := k.takeBack(ctx, res.Put, hooks)
	k.log.WarnContext(ctx, "the deployment's removal began while the sweep put hooks: taken back", "put", res.Put, "removed", removed, "failed", failed)
	res.Put = slices.DeleteFunc(res.Put, func(p string) bool {
		return slices.ContainsFunc(removed, func(r string) bool { return r == p || strings.HasPrefix(r, p+" kept for ") })
	})
	res.Failed = append(res.Failed, failed...)
	return res, again, err
}

// takeBack removes, once the deployment's removal has begun, the hooks
// this sweep put ("<group>/<hook>"), and no other: a hook it did not touch
// is the removal's. A group where an instance waits in a lifecycle action
// keeps the hook put there (rule 17: a hook is never removed under a
// drain; the sweep is no uninstall), and so does every group when their
// instances cannot be read: each is said (failed), for the removal, or a
// destroy run again, to remove once the action has ended.
func (k *Keeper) takeBack(ctx context.Context, put []string, hooks []discovery.Hook) (removed, failed []string) {
	var groups []string
	names := map[string][]string{}
	for _, p := range put {
		for _, hk := range hooks {
			if g, ok := strings.CutSuffix(p, "/"+hk.Name); ok && g != "" {
				if names[g] == nil {
					groups = append(groups, g)
				}
				names[g] = append(names[g], hk.Name)
				break
			}
		}
	}
	waiting, err := discovery.Waiting(ctx, k.c.Hooks, groups)
	if err != nil {
		return nil, []string{fmt.Sprintf("the hooks put (%s) left, not taken back: the instances waiting under them unread: %v", strings.Join(put, ", "), err)}
	}
	for _, g := range groups {
		if w := waiting[g]; len(w) > 0 {
			for _, n := range names[g] {
				failed = append(failed, fmt.Sprintf("%s/%s left, not taken back: %s waits under it (a hook is never removed under a drain); remove it once the action ends", g, n, strings.Join(w, ", ")))
			}
			continue
		}
		r, f := discovery.Remove(ctx, k.c.Hooks, []string{g}, names[g], k.cfg.FunctionName, false)
		removed, failed = append(removed, r...), append(failed, f...)
	}
	return removed, failed
}
