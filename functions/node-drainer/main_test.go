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

// asBootstrap, set in a test binary's environment, makes it run the
// bootstrap's main with Version set to its value (TestMain).
const asBootstrap = "NODE_DRAINER_TEST_AS_BOOTSTRAP"

func TestMain(m *testing.M) {
	if stamp, ok := os.LookupEnv(asBootstrap); ok {
		// what the Makefile's -X flag sets: internal/version's
		// TestMakefileStampReachesGet checks that the flag reaches Get
		version.Version = stamp
		main()
		os.Exit(0) // main returns only from lambda.Start
	}
	os.Exit(m.Run())
}

// The bootstrap's main, in a process of its own, stamped and started with no
// configuration at all: its first line, in Lambda's JSON log format, names
// the version before the configuration is read, and the error line that
// follows names it too. The process is this test binary (TestMain), not a
// build of the bootstrap: linking one took 14 s of CPU (39 s of wall time
// on a loaded machine), most of the unit tier's functions package.
func TestBootstrapLogsVersionFirst(t *testing.T) {
	const stamped = "v0.0.0-test-stamp"
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := exec.Command(self, "-test.run=^$")
	// no CLUSTER_NAME: misconfigured
	run.Env = []string{"AWS_LAMBDA_LOG_FORMAT=JSON", "HOME=" + t.TempDir(), asBootstrap + "=" + stamped}
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	err = run.Run()
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
