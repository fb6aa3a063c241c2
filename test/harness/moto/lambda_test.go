package moto_test

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/node-drainer/node-drainer/test/harness/lambdart"
)

// A function given a runtime is invoked there through moto's Lambda API, as
// terraform's aws_lambda_invocation calls it: the function's answer comes
// back, and its error as a FunctionError with the function's message. Once
// forgotten, Invoke is moto's again (which needs Docker, absent here).
func TestLambdaRuntime(t *testing.T) {
	ctx := reset(t)
	bootstrap := filepath.Join(t.TempDir(), "bootstrap")
	build := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-o", bootstrap, "../lambdart/testdata/fn")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the test function: %v\n%s", err, out)
	}
	rt, err := lambdart.Start(ctx, lambdart.Options{Bootstrap: bootstrap, FunctionName: "fn", Timeout: 10 * time.Second, MemoryMB: 128, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop() })

	cfg := srv.AWSConfig()
	role, err := iam.NewFromConfig(cfg).CreateRole(ctx, &iam.CreateRoleInput{RoleName: aws.String("fn"),
		AssumeRolePolicyDocument: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	if w, err := zw.Create("bootstrap"); err != nil {
		t.Fatal(err)
	} else {
		_, _ = w.Write([]byte("not run: the runtime runs the function"))
	}
	_ = zw.Close()
	lc := lambda.NewFromConfig(cfg)
	if _, err := lc.CreateFunction(ctx, &lambda.CreateFunctionInput{FunctionName: aws.String("fn"), Role: role.Role.Arn,
		Runtime: lambdatypes.RuntimeProvidedal2023, Handler: aws.String("bootstrap"), Code: &lambdatypes.FunctionCode{ZipFile: zipped.Bytes()}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetLambdaRuntime(ctx, "fn", rt.Endpoint()); err != nil {
		t.Fatal(err)
	}
	invoke := func(payload string) *lambda.InvokeOutput {
		t.Helper()
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := lc.Invoke(ictx, &lambda.InvokeInput{FunctionName: aws.String("fn"), Payload: []byte(payload)})
		if err != nil {
			t.Fatalf("Invoke %s: %v", payload, err)
		}
		return out
	}
	if out := invoke(`{"action":"echo","message":"hello"}`); out.FunctionError != nil || !strings.Contains(string(out.Payload), `"message":"hello"`) {
		t.Errorf("echo: %q %s; want the function's answer", aws.ToString(out.FunctionError), out.Payload)
	}
	if out := invoke(`{"action":"error","message":"refused"}`); out.FunctionError == nil || !strings.Contains(string(out.Payload), "refused") {
		t.Errorf("error: %q %s; want a FunctionError with the function's message", aws.ToString(out.FunctionError), out.Payload)
	}
	if n := len(rt.Invocations()); n != 2 {
		t.Errorf("the runtime ran %d invocations, want 2", n)
	}

	if err := srv.SetLambdaRuntime(ctx, "fn", ""); err != nil {
		t.Fatal(err)
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := lc.Invoke(ictx, &lambda.InvokeInput{FunctionName: aws.String("fn"), Payload: []byte(`{"action":"echo"}`)}); err == nil && out.FunctionError == nil {
		t.Errorf("a forgotten runtime still answered: %s", out.Payload)
	}
	if n := len(rt.Invocations()); n != 2 {
		t.Errorf("the forgotten runtime ran %d invocations, want 2", n)
	}
}
