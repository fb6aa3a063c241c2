package lambdart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/node-drainer/node-drainer/test/harness/lambdart"

	"github.com/node-drainer/node-drainer/test/harness"
)

// bootstrap is the test function, built once by TestMain.
var bootstrap string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lambdart-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bootstrap = filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bootstrap, "./testdata/fn")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building the test function: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func start(t *testing.T, o lambdart.Options) (*lambdart.Runtime, *harness.LogBuffer) {
	t.Helper()
	log := &harness.LogBuffer{}
	o.Bootstrap = bootstrap
	o.Log = log
	r, err := lambdart.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
		if err := r.Stop(); err != nil { // idempotent
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("function log:\n%s", log)
		}
	})
	return r, log
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func invoke(ctx context.Context, t *testing.T, r *lambdart.Runtime, payload string) lambdart.Result {
	t.Helper()
	res, err := r.Invoke(ctx, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

type info struct {
	RequestID  string            `json:"requestId"`
	ARN        string            `json:"arn"`
	DeadlineMs int64             `json:"deadlineMs"`
	PID        int               `json:"pid"`
	Count      int               `json:"count"`
	Env        map[string]string `json:"env"`
}

func invokeInfo(ctx context.Context, t *testing.T, r *lambdart.Runtime) (info, lambdart.Result) {
	t.Helper()
	start := time.Now()
	res := invoke(ctx, t, r, `{"action":"info"}`)
	if res.FunctionError != "" {
		t.Fatalf("info failed: %s", res.Payload)
	}
	var in info
	if err := json.Unmarshal(res.Payload, &in); err != nil {
		t.Fatal(err)
	}
	if d := time.UnixMilli(in.DeadlineMs).Sub(start); d < 0 || d > 20*time.Second {
		t.Errorf("deadline %v after the invocation began", d)
	}
	return in, res
}

func TestEchoErrorAndContext(t *testing.T) {
	ctx := testContext(t)
	r, log := start(t, lambdart.Options{
		FunctionName: "drainer", Timeout: 5 * time.Second, MemoryMB: 256, Env: []string{"EXTRA=yes"},
	})

	res := invoke(ctx, t, r, `{"action":"echo","message":"hi"}`)
	if res.FunctionError != "" || string(res.Payload) != `{"action":"echo","message":"hi"}` {
		t.Fatalf("echo: %+v %s", res, res.Payload)
	}

	res = invoke(ctx, t, r, `{"action":"error","message":"boom"}`)
	var doc struct{ ErrorMessage, ErrorType string }
	if err := json.Unmarshal(res.Payload, &doc); err != nil {
		t.Fatal(err)
	}
	if res.FunctionError != "Unhandled" || doc.ErrorMessage != "boom" || doc.ErrorType != "errorString" {
		t.Fatalf("error: %+v %s", res, res.Payload)
	}

	before := time.Now()
	in, res := invokeInfo(ctx, t, r)
	if d := time.UnixMilli(in.DeadlineMs).Sub(before); d < 4*time.Second || d > 5*time.Second+500*time.Millisecond {
		t.Errorf("deadline is %v after the invocation, want about 5s", d)
	}
	if in.RequestID != res.RequestID || in.ARN != r.FunctionARN() || in.Count != 3 || in.PID != r.PID() {
		t.Errorf("info %+v; result %+v; arn %s; pid %d", in, res, r.FunctionARN(), r.PID())
	}
	want := map[string]string{
		"AWS_LAMBDA_FUNCTION_NAME": "drainer", "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256", "AWS_REGION": "us-east-1", "AWS_LAMBDA_LOG_FORMAT": "JSON",
		"_HANDLER": "bootstrap", "AWS_ENDPOINT_URL_LAMBDA": r.Endpoint(), "EXTRA": "yes",
	}
	for k, v := range want {
		if in.Env[k] != v {
			t.Errorf("%s = %q, want %q", k, in.Env[k], v)
		}
	}
	if !strings.HasPrefix(in.Env["_X_AMZN_TRACE_ID"], "Root=1-") {
		t.Errorf("trace id %q", in.Env["_X_AMZN_TRACE_ID"])
	}

	invs := r.Invocations()
	if len(invs) != 3 || !invs[0].OK() || invs[1].OK() || invs[1].Error != "boom" || !invs[2].OK() {
		t.Fatalf("invocations: %+v", invs)
	}
	for _, inv := range invs {
		if inv.Async || inv.Start.Before(inv.Queued) || inv.End.Before(inv.Start) {
			t.Errorf("bad record %+v", inv)
		}
	}
	// the first invocation started the process: its init is measured; the
	// warm ones have none
	if invs[0].Init <= 0 || invs[0].Init > invs[0].Start.Sub(invs[0].Queued) || invs[1].Init != 0 || invs[2].Init != 0 {
		t.Errorf("init durations %v %v %v: want only the cold start's, within its wait", invs[0].Init, invs[1].Init, invs[2].Init)
	}
	if n := strings.Count(log.String(), `"type":"platform.report"`); n != 3 {
		t.Errorf("want 3 platform.report lines, got %d:\n%s", n, log)
	}
}

func TestTimeoutRestartsProcess(t *testing.T) {
	ctx := testContext(t)
	r, _ := start(t, lambdart.Options{Timeout: time.Second})

	first, _ := invokeInfo(ctx, t, r)
	began := time.Now()
	res := invoke(ctx, t, r, `{"action":"sleep","millis":5000}`)
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("timed-out invocation took %v", took)
	}
	if res.FunctionError != "Unhandled" || !bytes.Contains(res.Payload, []byte("Task timed out after 1.00 seconds")) {
		t.Fatalf("want a timeout, got %+v %s", res, res.Payload)
	}
	if pid := r.PID(); pid != 0 {
		t.Errorf("PID after timeout = %d, want 0 (killed)", pid)
	}
	second, _ := invokeInfo(ctx, t, r)
	if second.PID == first.PID || second.Count != 1 {
		t.Errorf("want a fresh process after the timeout: first %+v, second %+v", first, second)
	}
	invs := r.Invocations()
	if len(invs) != 3 || !invs[1].TimedOut() || invs[1].ErrorType != "Sandbox.Timedout" {
		t.Fatalf("invocations: %+v", invs)
	}
}

func TestPanicRestartsProcess(t *testing.T) {
	ctx := testContext(t)
	r, _ := start(t, lambdart.Options{})
	first, _ := invokeInfo(ctx, t, r)
	res := invoke(ctx, t, r, `{"action":"panic","message":"oops"}`)
	if res.FunctionError != "Unhandled" || !bytes.Contains(res.Payload, []byte("oops")) {
		t.Fatalf("panic: %+v %s", res, res.Payload)
	}
	second, _ := invokeInfo(ctx, t, r)
	if second.PID == first.PID || second.Count != 1 {
		t.Errorf("want a fresh process after the panic: first %+v, second %+v", first, second)
	}
}

func TestAsyncSelfInvoke(t *testing.T) {
	ctx := testContext(t)
	r, _ := start(t, lambdart.Options{})
	res := invoke(ctx, t, r, `{"action":"invoke-async","payload":{"action":"echo","message":"later"}}`)
	if res.FunctionError != "" || string(res.Payload) != `{"statusCode":202}` {
		t.Fatalf("self-invoke: %+v %s", res, res.Payload)
	}
	if err := r.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	invs := r.Invocations()
	if len(invs) != 2 || invs[0].Async || !invs[1].Async || !invs[1].OK() ||
		string(invs[1].Payload) != `{"action":"echo","message":"later"}` || invs[1].Start.Before(invs[0].End) {
		t.Fatalf("invocations: %+v", invs)
	}
}

func TestAsyncRetries(t *testing.T) {
	for _, retries := range []int{0, lambdart.DefaultAsyncRetries} {
		t.Run(fmt.Sprint(retries), func(t *testing.T) {
			ctx := testContext(t)
			r, _ := start(t, lambdart.Options{AsyncRetries: retries})
			id, err := r.InvokeAsync([]byte(`{"action":"error","message":"fails"}`))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			invs := r.Invocations()
			if len(invs) != retries+1 {
				t.Fatalf("want %d attempts, got %+v", retries+1, invs)
			}
			for i, inv := range invs {
				if inv.RequestID != id || inv.Attempt != i || !inv.Async || inv.Error != "fails" {
					t.Errorf("attempt %d: %+v", i, inv)
				}
			}
		})
	}
}

// TestInvokeAPIWithSDK checks that aws-sdk-go-v2's lambda client parses the
// emulator's Invoke API answers.
func TestInvokeAPIWithSDK(t *testing.T) {
	ctx := testContext(t)
	r, _ := start(t, lambdart.Options{FunctionName: "drainer", AsyncRetries: 0})
	client := sdkClient(r)

	out, err := client.Invoke(ctx, &awslambda.InvokeInput{
		FunctionName: aws.String("drainer"), Payload: []byte(`{"action":"echo","message":"sync"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.StatusCode != 200 || out.FunctionError != nil || string(out.Payload) != `{"action":"echo","message":"sync"}` ||
		aws.ToString(out.ExecutedVersion) != "$LATEST" {
		t.Fatalf("sync invoke: %+v %s", out, out.Payload)
	}

	out, err = client.Invoke(ctx, &awslambda.InvokeInput{
		FunctionName: aws.String(r.FunctionARN()), Payload: []byte(`{"action":"error","message":"sync boom"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.StatusCode != 200 || aws.ToString(out.FunctionError) != "Unhandled" || !bytes.Contains(out.Payload, []byte(`"errorMessage":"sync boom"`)) {
		t.Fatalf("sync invoke error: %+v %s", out, out.Payload)
	}

	out, err = client.Invoke(ctx, &awslambda.InvokeInput{
		FunctionName: aws.String("drainer"), InvocationType: types.InvocationTypeEvent, Payload: []byte(`{"action":"echo"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.StatusCode != 202 || len(out.Payload) != 0 {
		t.Fatalf("async invoke: %+v", out)
	}

	_, err = client.Invoke(ctx, &awslambda.InvokeInput{FunctionName: aws.String("nope"), Payload: []byte(`{}`)})
	var notFound *types.ResourceNotFoundException
	if !errors.As(err, &notFound) {
		t.Fatalf("want ResourceNotFoundException, got %T %v", err, err)
	}

	if err := r.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	invs := r.Invocations()
	if len(invs) != 3 || !invs[2].Async || !invs[2].OK() {
		t.Fatalf("invocations: %+v", invs)
	}
}

func TestStopFailsQueued(t *testing.T) {
	r, _ := start(t, lambdart.Options{Timeout: 10 * time.Second})
	done := make(chan error, 1)
	go func() {
		res, err := r.Invoke(context.Background(), []byte(`{"action":"sleep","millis":5000}`))
		if err == nil && res.FunctionError == "" {
			err = fmt.Errorf("want a failure, got %+v", res)
		}
		done <- err
	}()
	for len(r.Invocations()) == 0 || r.Invocations()[0].Start.IsZero() {
		time.Sleep(10 * time.Millisecond) // until the sleep runs
	}
	if _, err := r.InvokeAsync([]byte(`{"action":"echo"}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Invoke did not return after Stop")
	}
	if _, err := r.Invoke(context.Background(), []byte(`{}`)); err == nil {
		t.Fatal("Invoke after Stop succeeded")
	}
	invs := r.Invocations()
	if len(invs) != 2 {
		t.Fatalf("invocations: %+v", invs)
	}
	for _, inv := range invs {
		if !inv.Done() || inv.OK() {
			t.Errorf("want failed after Stop: %+v", inv)
		}
	}
}

func TestInitFailure(t *testing.T) {
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Fatal("install coreutils (false): ", err)
	}
	r, err := lambdart.Start(context.Background(), lambdart.Options{Bootstrap: falseBin})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	res := invoke(testContext(t), t, r, `{}`)
	if res.FunctionError != "Unhandled" || !bytes.Contains(res.Payload, []byte("Runtime exited during init: exit status 1")) {
		t.Fatalf("want an init failure, got %+v %s", res, res.Payload)
	}
	if invs := r.Invocations(); len(invs) != 1 || invs[0].ErrorType != "Runtime.ExitError" {
		t.Fatalf("invocations: %+v", invs)
	}
}

// The runtime answers its own function's configuration and tags as Lambda
// does (what a function reads and marks itself with), and 404 for another
// function.
func TestOwnTagsAndConfiguration(t *testing.T) {
	ctx := testContext(t)
	r, _ := start(t, lambdart.Options{FunctionName: "drainer", AsyncRetries: 0})
	client := sdkClient(r)
	conf, err := client.GetFunctionConfiguration(ctx, &awslambda.GetFunctionConfigurationInput{FunctionName: aws.String("drainer")})
	if err != nil || aws.ToString(conf.FunctionArn) != r.FunctionARN() {
		t.Fatalf("configuration: %+v, %v", conf, err)
	}
	arn := aws.String(r.FunctionARN())
	if out, err := client.ListTags(ctx, &awslambda.ListTagsInput{Resource: arn}); err != nil || len(out.Tags) != 0 {
		t.Fatalf("tags at the start: %+v, %v", out, err)
	}
	if _, err := client.TagResource(ctx, &awslambda.TagResourceInput{Resource: arn, Tags: map[string]string{"a": "1", "b": "2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.UntagResource(ctx, &awslambda.UntagResourceInput{Resource: arn, TagKeys: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if out, err := client.ListTags(ctx, &awslambda.ListTagsInput{Resource: arn}); err != nil || len(out.Tags) != 1 || out.Tags["b"] != "2" {
		t.Fatalf("tags after tag and untag: %+v, %v", out, err)
	}
	var nf *types.ResourceNotFoundException
	if _, err := client.ListTags(ctx, &awslambda.ListTagsInput{Resource: aws.String(r.FunctionARN() + "-other")}); !errors.As(err, &nf) {
		t.Fatalf("another function's tags: %v, want ResourceNotFoundException", err)
	}
}

// sdkClient is an SDK Lambda client of the runtime's API.
func sdkClient(r *lambdart.Runtime) *awslambda.Client {
	return awslambda.New(awslambda.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(r.Endpoint()),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}
