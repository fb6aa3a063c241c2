package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/hooks"
	"github.com/node-drainer/node-drainer/internal/version"
)

func TestStartingLine(t *testing.T) {
	var buf bytes.Buffer
	starting(slog.New(slog.NewJSONHandler(&buf, nil)))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %v: %q", err, buf.String())
	}
	for k, want := range map[string]string{"msg": "node-drainer starting", "version": version.Get(), "go": runtime.Version(), "arch": runtime.GOARCH} {
		if line[k] != want {
			t.Errorf("%s = %v, want %q (line %s)", k, line[k], want, buf.String())
		}
	}
}

// The real bootstrap, stamped the way the Makefile stamps it and started with
// no configuration at all: its first line, in Lambda's JSON log format, names
// the version before the configuration is read, and the error line that
// follows names it too.
func TestBootstrapLogsVersionFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const stamped = "v0.0.0-test-stamp"
	bin := filepath.Join(t.TempDir(), "bootstrap")
	// the test binary's own build settings, so that every package comes
	// from the build cache it just filled: a release build (-trimpath,
	// CGO_ENABLED=0, lambda.norpc) compiles the whole tree again, which on
	// a cold cache took longer than the unit tests' timeout; the release
	// build is checked by test/deploy's TestMakeDist
	build := exec.Command("go", "build", "-ldflags", "-X github.com/node-drainer/node-drainer/internal/version.Version="+stamped, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := exec.Command(bin)
	run.Env = []string{"AWS_LAMBDA_LOG_FORMAT=JSON", "HOME=" + t.TempDir()} // no CLUSTER_NAME: misconfigured
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	err := run.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("want exit status 1 without configuration, got %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var lines []map[string]any
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON log line: %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) < 2 {
		t.Fatalf("want the starting line and the error line, got %d lines: %s", len(lines), stdout.String())
	}
	first := lines[0]
	for k, want := range map[string]string{"message": "node-drainer starting", "level": "INFO", "version": stamped, "go": runtime.Version(), "arch": runtime.GOARCH} {
		if first[k] != want {
			t.Errorf("first line: %s = %v, want %q (line %v)", k, first[k], want, first)
		}
	}
	last := lines[len(lines)-1]
	if last["message"] != "node-drainer cannot start" || last["version"] != stamped || last["error"] == nil {
		t.Errorf("last line: want the start error with the version and the error, got %v", last)
	}
}

// An AWS endpoint that accepts calls and never answers: each attempt ends at
// the limit and the SDK's retryer tries again, so the call fails in about
// attempts × limit instead of waiting for the invocation's deadline.
func TestAWSAttemptsAreBounded(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	client := ec2.New(ec2.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   awsHTTPClient(200 * time.Millisecond),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 2
			o.MaxBackoff = 10 * time.Millisecond
		}),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	took := time.Since(start)
	if err == nil || ctx.Err() != nil || took > 5*time.Second {
		t.Fatalf("DescribeInstances = %v after %s (context: %v); want a timeout error well before the context's end", err, took, ctx.Err())
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d attempts reached the endpoint, want 2 (the timeout retried once)", n)
	}
}

// noHooks is an Auto Scaling client no request of the test may reach.
type noHooks struct{ discovery.API }

// A cluster that cannot be reached (deleted before node-drainer, its
// kubeconfig unreadable) fails each event's invocation, saying so, and is
// tried again by the next; the deployment's own hook request is served
// without it, and without trying it (an uninstall still removes the
// hooks); once reached, the handler is kept.
func TestServiceWithoutCluster(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	down := errors.New("DescribeCluster: ResourceNotFoundException: No cluster found for name: prod")
	tries := 0
	s := &service{log: log, hooks: hooks.New(config.Config{}, hooks.Clients{Hooks: noHooks{}}, log)}
	s.connect = func(context.Context) (*handler.Handler, error) {
		tries++
		if tries < 2 {
			return nil, down
		}
		return handler.New(config.Config{}, handler.Clients{}, log), nil
	}
	event, err := os.ReadFile("../../events/asg-test-notification.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.handle(ctx, event); err == nil || !errors.Is(err, down) || tries != 1 {
		t.Errorf("an event without the cluster: %v after %d tries; want the cluster's error, tried once", err, tries)
	}
	// terraform destroy's invocation, for groups chosen by no tag: nothing to
	// remove, nothing asked of Auto Scaling
	destroy := []byte(`{"NodeDrainer":"lifecycle-hooks","AsgTagKey":"","AsgTagValue":"","TerminateHookName":"node-drainer-terminate","CreateTerminateHook":"true","HeartbeatTimeout":"300","tf":{"action":"delete","prev_input":null}}`)
	if out, err := s.handle(ctx, destroy); err != nil || out.(hooks.Outcome).Action != hooks.ActionHooks || tries != 1 {
		t.Errorf("terraform's hook request without the cluster: %+v, %v (tries %d); want it served, the cluster not tried", out, err, tries)
	}
	if s.h != nil {
		t.Fatal("a handler kept while the cluster could not be reached")
	}
	if out, err := s.handle(ctx, event); err != nil || out.(handler.Outcome).Event != "test-notification" || tries != 2 {
		t.Errorf("the event once the cluster is back: %+v, %v (tries %d)", out, err, tries)
	}
	if _, err := s.handle(ctx, event); err != nil || tries != 2 {
		t.Errorf("the next event: %v, tries %d; want the handler kept", err, tries)
	}
}
