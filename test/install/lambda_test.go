package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/node-drainer/node-drainer/test/harness"
)

// lambdaService runs the functions terraform deploys when the emulator's
// Lambda Invoke is called for them, as Lambda would: terraform's
// aws_lambda_invocation (the module's hooks resource, on apply and destroy)
// reaches the function this way. Each Invoke reads the function's
// configuration from the emulator (environment, role, timeout, memory) and
// runs the package's bootstrap with it under the runtime emulator, as
// drainWith does (runDeployed). terraformRoot.run routes its function's
// Invoke here while terraform applies or destroys (the SAM path's functions
// stay moto's: its custom resource is invoked by the test, samhooks_test.go).
type lambdaService struct {
	url string
	mu  sync.Mutex
	// runs counts the invocations run, by function name
	runs map[string]int
	// atDelete is what the function's rules were when terraform invoked it
	// to remove the hooks (tf.action delete), by function name
	atDelete map[string]rulesAtDelete
	// sweepAfter names the functions whose removal (tf.action delete) is
	// followed by one sweep of the same function, before terraform is
	// answered (the function still exists then), with the group whose
	// hooks are read between the two (hooksAtRemoval)
	sweepAfter map[string]string
	// hooksAtRemoval are that group's hooks right after the removal, by
	// function name
	hooksAtRemoval map[string][]string
}

// sweepAfterDelete has the service run one sweep of the function right
// after it served the function's removal of the hooks (terraform's delete),
// as a sweep Lambda retries, or the schedule started in those seconds,
// would run; the hooks of group are read in between.
func (s *lambdaService) sweepAfterDelete(name, group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepAfter[name] = group
}

// hooksAfterRemoval are the hooks of sweepAfterDelete's group right after
// the function's removal of the hooks, before the sweep.
func (s *lambdaService) hooksAfterRemoval(name string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.hooksAtRemoval[name]
	return h, ok
}

// rulesAtDelete: at the removal, the sweep's rule must be gone (no sweep
// puts the hooks back) and the terminate hook's rule still target the
// function (a removal that fails leaves hooks whose events still arrive).
type rulesAtDelete struct {
	SweepRule         bool // <function>-sweep exists
	TerminateTargets  int  // targets of <function>-terminate-hook
	TerminateRuleRead bool // <function>-terminate-hook could be read
}

func (s *lambdaService) rulesAtDelete(name string) (rulesAtDelete, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.atDelete[name]
	return r, ok
}

// readRules reads the function's sweep and terminate-hook rules now.
func readRules(ctx context.Context, eb *eventbridge.Client, fn string) rulesAtDelete {
	var r rulesAtDelete
	_, err := eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(fn + "-sweep")})
	r.SweepRule = err == nil
	if t, err := eb.ListTargetsByRule(ctx, &eventbridge.ListTargetsByRuleInput{Rule: aws.String(fn + "-terminate-hook")}); err == nil {
		r.TerminateRuleRead, r.TerminateTargets = true, len(t.Targets)
	}
	return r
}

// lambdaSvc is TestDeploy's; nil outside it.
var lambdaSvc *lambdaService

func (s *lambdaService) ran(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[name]
}

// serveLambda starts the service for as long as t runs; the function's log
// goes to t's.
func serveLambda(t *testing.T, ctx context.Context) *lambdaService {
	s := &lambdaService{runs: map[string]int{}, atDelete: map[string]rulesAtDelete{}, sweepAfter: map[string]string{}, hooksAtRemoval: map[string][]string{}}
	lc := lambda.NewFromConfig(env.AWS.AWSConfig())
	eb := eventbridge.NewFromConfig(env.AWS.AWSConfig())
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		payload, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var tf struct {
			TF struct {
				Action string `json:"action"`
			} `json:"tf"`
		}
		if json.Unmarshal(payload, &tf) == nil && tf.TF.Action == "delete" {
			rules := readRules(ctx, eb, name)
			s.mu.Lock()
			s.atDelete[name] = rules
			s.mu.Unlock()
		}
		res, err := invokeDeployed(ctx, lc, name, payload, testWriter{t})
		if err != nil {
			t.Logf("Lambda Invoke of %s: %v", name, err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		s.mu.Lock()
		s.runs[name]++
		s.mu.Unlock()
		t.Logf("Lambda Invoke of %s (%s): %s %s", name, payload, res.FunctionError, res.Payload)
		s.mu.Lock()
		group, sweep := s.sweepAfter[name]
		s.mu.Unlock()
		if sweep && tf.TF.Action == "delete" {
			if hs, err := asc.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group)}); err == nil {
				names := []string{}
				for _, h := range hs.LifecycleHooks {
					names = append(names, aws.ToString(h.LifecycleHookName))
				}
				sort.Strings(names)
				s.mu.Lock()
				s.hooksAtRemoval[name] = names
				s.mu.Unlock()
			}
			ev, err := harness.EventFile("sweep.json", nil)
			if err == nil {
				var sw invokedResult
				sw, err = invokeDeployed(ctx, lc, name, ev, testWriter{t})
				t.Logf("a sweep of %s after its removal of the hooks: %s %s", name, sw.FunctionError, sw.Payload)
			}
			if err != nil {
				t.Logf("the sweep of %s after its removal: %v", name, err)
			}
		}
		if res.FunctionError != "" {
			w.Header().Set("X-Amz-Function-Error", res.FunctionError)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(res.Payload)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// route sends the emulator's Invoke of function here until the returned
// func is called.
func (s *lambdaService) route(ctx context.Context, function string) (func(), error) {
	if err := env.AWS.SetLambdaRuntime(ctx, function, s.url); err != nil {
		return nil, err
	}
	return func() { _ = env.AWS.SetLambdaRuntime(context.WithoutCancel(ctx), function, "") }, nil
}

// invokedResult is one invocation's answer, as Lambda's Invoke gives it.
type invokedResult struct {
	Payload       []byte
	FunctionError string
}

// invokeDeployed runs one invocation of the deployed function name in a
// runtime of its own, started for it and stopped after.
func invokeDeployed(ctx context.Context, lc *lambda.Client, name string, payload []byte, log io.Writer) (invokedResult, error) {
	fc, err := lc.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(name)})
	if err != nil {
		return invokedResult{}, fmt.Errorf("reading the function's configuration: %w", err)
	}
	fn := deployedFunction{Bootstrap: bootstrap, Name: name, RoleARN: aws.ToString(fc.Role),
		Timeout: time.Duration(aws.ToInt32(fc.Timeout)) * time.Second, MemoryMB: int(aws.ToInt32(fc.MemorySize))}
	if fc.Environment != nil {
		fn.Env = fc.Environment.Variables
	}
	rt, err := runDeployed(ctx, fn, log)
	if err != nil {
		return invokedResult{}, err
	}
	defer func() { _ = rt.Stop() }()
	res, err := rt.Invoke(ctx, payload)
	if err != nil {
		return invokedResult{}, err
	}
	return invokedResult{Payload: res.Payload, FunctionError: res.FunctionError}, nil
}
