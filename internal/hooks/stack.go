package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/event"
)

// SAM's template puts the lifecycle hooks of the groups it lists through a
// custom resource served by the function itself (Custom::LifecycleHooks),
// instead of one AWS::AutoScaling::LifecycleHook per group with Fn::ForEach,
// which makes `sam build` depend on the SAM CLI's version and keeps the
// template out of the Serverless Application Repository. CloudFormation
// sends it Create, Update and Delete; the answer, aws-lambda-go's
// cfn.Response, is PUT on the request's presigned URL (answerStack).
//
//	Create  the hooks on every listed group (a name that is no group fails
//	        the stack, as the hook resource would have) and on the tagged
//	        groups of this cluster (a deployment with no sweep hooks them);
//	Update  the new properties' hooks on the listed and the tagged groups,
//	        then what the old properties' deployment had that the new one
//	        does not removed: a group still listed or tagged keeps its hook
//	        (removing it would end the drain in flight under it);
//	Delete  the deployment's hooks removed from the listed groups and from
//	        the groups carrying the tag, which the sweep put there: an
//	        uninstalled node-drainer leaves no hook that would hold every
//	        scale-in for its heartbeat timeout.
//
// (stackhooks.go.) Only hooks of the names the properties give are ever
// touched (rule 9), and a removal only those marked the deployment's
// (internal/discovery/marks.go): another deployment's stay. A second
// resource of the same properties and Release "true"
// (LifecycleHooksRelease) serves an update's first step, before the
// grants change: the hooks of the groups leaving the deployment removed.

// terraform's module has its own hook resources for the groups it lists, and
// an aws_lambda_invocation (lifecycle_scope CRUD) for the rest: the module's
// hook properties (no AsgNames) with terraform's action, create, update or
// delete, under "tf". It is served as the custom resource's Create, Update
// and Delete, answered as the invocation's result or error: `terraform
// destroy` removes the hooks the sweep put on tagged groups, and fails,
// saying which, when it cannot.

// stackRequest reports whether payload is a CloudFormation custom resource
// request (not an EventBridge event), and decodes it.
func stackRequest(payload []byte) (cfn.Event, bool) {
	var req cfn.Event
	// a payload that is no object, or an event (none has these fields), is
	// for event.ParseInvocation
	if json.Unmarshal(payload, &req) != nil || req.RequestType == "" || req.ResponseURL == "" || req.StackID == "" || req.ResourceType == "" {
		return cfn.Event{}, false
	}
	return req, true
}

// terraformMarker is the value of the module's input's NodeDrainer field.
const terraformMarker = "lifecycle-hooks"

// terraformRequest reports whether payload is the terraform module's
// invocation, and gives it as the custom resource request it stands for.
func terraformRequest(payload []byte) (cfn.Event, bool, error) {
	var head struct {
		NodeDrainer string `json:"NodeDrainer"`
		TF          *struct {
			Action    string         `json:"action"`
			PrevInput map[string]any `json:"prev_input"`
		} `json:"tf"`
	}
	// a field of the wrong type is skipped, the others decoded
	bad := json.Unmarshal(payload, &head)
	if head.NodeDrainer != terraformMarker {
		return cfn.Event{}, false, nil
	}
	if bad != nil {
		return cfn.Event{}, true, errors.New(`terraform's invocation: "tf" is not an object`)
	}
	var action string
	if head.TF != nil {
		action = head.TF.Action
	}
	kind, ok := map[string]cfn.RequestType{"create": cfn.RequestCreate, "update": cfn.RequestUpdate, "delete": cfn.RequestDelete}[action]
	if !ok {
		return cfn.Event{}, true, fmt.Errorf("terraform's invocation: action %q is none of create, update, delete (lifecycle_scope must be CRUD)", action)
	}
	var props map[string]any
	if err := json.Unmarshal(payload, &props); err != nil {
		return cfn.Event{}, true, fmt.Errorf("terraform's invocation: %w", err)
	}
	delete(props, "tf")
	return cfn.Event{RequestType: kind, ResourceProperties: props, OldResourceProperties: head.TF.PrevInput}, true, nil
}

// terraformResource serves the module's invocation; the error is what
// terraform reports (the apply or destroy fails on it).
func (k *Keeper) terraformResource(ctx context.Context, req cfn.Event, bad error) (Outcome, error) {
	start := k.now()
	var did []string
	err := bad
	if err == nil {
		did, err = k.serveHooks(ctx, req)
	}
	out := k.hooksOutcome(start, did, err, "")
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
	}
	k.log.Log(ctx, level, "handled", "request", "terraform "+string(req.RequestType), "outcome", out, "error", err)
	return out, err
}

// hooksOutcome is the Outcome of a hooks request begun at start: what it
// changed, and, when it failed, says and why.
func (k *Keeper) hooksOutcome(start time.Time, did []string, failed error, says string) Outcome {
	out := Outcome{Event: event.KindStackResource, Action: ActionHooks, DurationMS: k.now().Sub(start).Milliseconds(), Detail: strings.Join(did, ", ")}
	if failed != nil {
		out.Action, out.Detail = ActionFailed, strings.TrimPrefix(out.Detail+"; "+says+failed.Error(), "; ")
	}
	return out
}

// stackResource serves one custom resource request and answers
// CloudFormation. The error is the answer's failing to reach it (Lambda
// retries the invocation); what the request asked that could not be done
// is the answer's FAILED status and reason.
func (k *Keeper) stackResource(ctx context.Context, req cfn.Event) (Outcome, error) {
	start := k.now()
	log := k.log.With("request", req.RequestType, "resource", req.LogicalResourceID, "stack", req.StackID)
	r := cfn.NewResponse(&req)
	r.PhysicalResourceID = req.PhysicalResourceID
	if r.PhysicalResourceID == "" {
		r.PhysicalResourceID = "node-drainer-lifecycle-hooks" // one per stack: an update never replaces it
	}
	defer func() {
		if p := recover(); p != nil { // answered, as cfn.LambdaWrap does: the stack does not wait an hour
			r.Status, r.Reason = cfn.StatusFailed, "node-drainer panicked: see its log"
			_ = answerStack(context.WithoutCancel(ctx), req.ResponseURL, r)
			panic(p)
		}
	}()
	did, served := k.serveHooks(ctx, req) // served: what the answer says FAILED with
	r.Data = map[string]any{"Changed": strings.Join(did, ",")}
	r.Status = cfn.StatusSuccess
	if served != nil {
		r.Status, r.Reason = cfn.StatusFailed, served.Error()
	}
	// bounded by the invocation's deadline less DEADLINE_MARGIN: a URL
	// that hangs fails this invocation, which Lambda retries, rather than
	// holding it to its timeout (a timed-out invocation answers nothing)
	actx, cancel := beforeMargin(ctx, k.cfg.DeadlineMargin)
	defer cancel()
	sendErr := answerStack(actx, req.ResponseURL, r)
	out := k.hooksOutcome(start, did, served, "answered FAILED: ")
	var err error
	if sendErr != nil {
		err = fmt.Errorf("answering CloudFormation: %w", sendErr)
	}
	level := slog.LevelInfo
	if served != nil || err != nil {
		level = slog.LevelError
	}
	log.Log(ctx, level, "handled", "outcome", out, "error", err)
	return out, err
}

// stackAnswerTries is how many times an answer is PUT at most, each attempt
// bounded by stackAnswerAttempt.
const (
	stackAnswerTries   = 4
	stackAnswerAttempt = 10 * time.Second
)

// answerStack PUTs the answer r on the request's presigned URL as
// cfn.LambdaWrap does (its JSON, no Content-Type: the URL's signature has
// none), with two differences, which is why it is not LambdaWrap's: each
// attempt is bounded and follows ctx (LambdaWrap's send has neither: a URL
// that does not answer held the invocation to its timeout), and an attempt
// that fails for a cause that may pass (the connection, a 5xx, 429) is made
// again with backoff. An answer lost leaves the stack waiting an hour for
// CloudFormation's own timeout; another status (403: the URL expired) is
// not tried again.
func answerStack(ctx context.Context, url string, r *cfn.Response) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var last error
	tries := 0
	err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: stackAnswerTries},
		func(ctx context.Context) (bool, error) {
			tries++
			actx, cancel := context.WithTimeout(ctx, stackAnswerAttempt)
			defer cancel()
			req, err := http.NewRequestWithContext(actx, http.MethodPut, url, bytes.NewReader(body))
			if err != nil {
				return false, err
			}
			req.Header.Del("Content-Type")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				last = err
				return false, nil
			}
			text, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return true, nil
			}
			last = fmt.Errorf("CloudFormation's URL answered %d: %s", res.StatusCode, text)
			if res.StatusCode >= 500 || res.StatusCode == http.StatusTooManyRequests {
				return false, nil
			}
			return false, last
		})
	if wait.Interrupted(err) && last != nil {
		return fmt.Errorf("%d attempt(s): %w", tries, last)
	}
	return err
}

// beforeMargin is ctx ending margin before its deadline (ctx itself, with
// no deadline).
func beforeMargin(ctx context.Context, margin time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, d.Add(-margin))
	}
	return context.WithCancel(ctx)
}
