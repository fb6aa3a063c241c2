package install

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
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
	// runs counts the invocations run, by function name
	mu   sync.Mutex
	runs map[string]int
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
	s := &lambdaService{runs: map[string]int{}}
	lc := lambda.NewFromConfig(env.AWS.AWSConfig())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		payload, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
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
