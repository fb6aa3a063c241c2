// Package moto runs moto, the AWS emulator, as a child process for the
// test harness, with node-drainer's extension for Auto Scaling lifecycle
// actions and EKS access entries (see motoext.py), DescribeCluster
// answers that SetEKSCluster chooses, and CloudWatch's metric-alarm
// operations over the Smithy rpc-v2-cbor protocol that aws-sdk-go-v2's
// CloudWatch client speaks (moto 5.2.1 speaks only the query protocol).
//
// moto 5.2.1 does not implement CompleteLifecycleAction and
// RecordLifecycleActionHeartbeat. The embedded motoext.py adds them with the
// semantics of real AWS: the harness registers an active lifecycle action
// (RegisterLifecycleAction), as a real Auto Scaling group would create one
// when it starts terminating or launching an instance. Completing it removes
// it; completing or heartbeating an action that is not active fails with
// HTTP 400, code ValidationError and the message
// "No active Lifecycle Action found with token <token>" (or "with instance
// ID <id>"), which aws-sdk-go-v2 surfaces as a smithy.APIError. Every call is
// recorded and can be read back with LifecycleCalls.
//
// As in AWS, an action also ends without a call: at its hook's
// HeartbeatTimeout after it began or after its last heartbeat (or its
// GlobalTimeout), with the hook's DefaultResult; when another action of
// its instance's transition ends with ABANDON; and when its hook is
// deleted (CONTINUE for a terminating instance, ABANDON for a launching
// one). The instance waits until every action of its transition has
// ended. EndedActions says how each ended.
//
// moto needs python3 with moto's server extras (pip install 'moto[server]').
package moto

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

//go:embed motoext.py
var extension []byte

// Region, AccessKeyID and SecretAccessKey are what AWSConfig uses.
// AccountID is the account moto puts every resource in.
const (
	Region          = "us-east-1"
	AccessKeyID     = "test"
	SecretAccessKey = "test"
	AccountID       = "123456789012"
)

// startTimeout bounds how long Start waits for moto (it needs 3-4 s).
const startTimeout = 60 * time.Second

// Server is a running moto process.
type Server struct {
	url   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   *os.File
	http  *http.Client

	stopOnce sync.Once
	stopErr  error
	exited   chan struct{}
	waitErr  error
}

// LifecycleAction is an active lifecycle action, as an Auto Scaling group
// creates one for each instance that enters a Pending:Wait or
// Terminating:Wait state of a lifecycle hook.
type LifecycleAction struct {
	ASG        string `json:"asg"`
	Hook       string `json:"hook"`
	InstanceID string `json:"instanceId"`
	Token      string `json:"token"`
	// Transition defaults to autoscaling:EC2_INSTANCE_TERMINATING.
	Transition string `json:"transition,omitempty"`
}

// LifecycleCall is one CompleteLifecycleAction or
// RecordLifecycleActionHeartbeat call that reached the emulator.
type LifecycleCall struct {
	Time time.Time `json:"time"`
	// Operation is CompleteLifecycleAction or RecordLifecycleActionHeartbeat.
	Operation string `json:"operation"`
	// Params holds the call's parameters by their API names
	// (AutoScalingGroupName, LifecycleHookName, LifecycleActionToken,
	// InstanceId, LifecycleActionResult).
	Params map[string]string `json:"params"`
	// Outcome is "ok" or the error message returned.
	Outcome string `json:"outcome"`
	// Caller is the access key ID that signed the call: AccessKeyID for
	// the harness's own clients and aws-node-termination-handler, a
	// session's key for the function (the drainer role's).
	Caller string `json:"caller"`
}

// OK reports whether the call succeeded.
func (c LifecycleCall) OK() bool { return c.Outcome == "ok" }

// EndedAction is a lifecycle action that ended, how and when.
type EndedAction struct {
	LifecycleAction
	// Result is CONTINUE or ABANDON.
	Result string `json:"result"`
	// Cause is one of the End* constants.
	Cause string    `json:"cause"`
	Time  time.Time `json:"time"`
}

// Causes of an EndedAction.
const (
	// EndCompleted: a CompleteLifecycleAction call.
	EndCompleted = "CompleteLifecycleAction"
	// EndTimeout: the hook's HeartbeatTimeout passed since the action
	// began or its last heartbeat; Result is the hook's DefaultResult.
	EndTimeout = "HeartbeatTimeout"
	// EndGlobalTimeout: the action waited its GlobalTimeout (100 times the
	// heartbeat timeout, at most 48 hours), heartbeats or not.
	EndGlobalTimeout = "GlobalTimeout"
	// EndAbandoned: another action of the instance's transition ended with
	// ABANDON, which ends the rest.
	EndAbandoned = "Abandoned"
	// EndHookDeleted: DeleteLifecycleHook of its hook (CONTINUE for a
	// terminating instance, ABANDON for a launching one).
	EndHookDeleted = "DeleteLifecycleHook"
)

// Start starts moto on a free port of 127.0.0.1 and waits until it answers.
// moto's output goes to dir/moto.log. Stop the server when done.
func Start(ctx context.Context, dir string) (*Server, error) {
	python, err := exec.LookPath("python3")
	if err != nil {
		return nil, errors.New("moto: python3 not found in PATH: install python3 and moto (pip install 'moto[server]')")
	}
	script := filepath.Join(dir, "motoext.py")
	if err := os.WriteFile(script, extension, 0o644); err != nil {
		return nil, fmt.Errorf("moto: writing extension: %w", err)
	}
	portFile := filepath.Join(dir, "moto.port")
	_ = os.Remove(portFile)
	logFile, err := os.Create(filepath.Join(dir, "moto.log"))
	if err != nil {
		return nil, fmt.Errorf("moto: creating log: %w", err)
	}

	cmd := exec.Command(python, script, "--host", "127.0.0.1", "--port-file", portFile)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe() // the script exits when this closes
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("moto: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("moto: starting python3: %w", err)
	}
	s := &Server{
		cmd:    cmd,
		stdin:  stdin,
		log:    logFile,
		http:   &http.Client{Timeout: 30 * time.Second},
		exited: make(chan struct{}),
	}
	go func() { s.waitErr = cmd.Wait(); close(s.exited) }()

	if err := s.waitReady(ctx, portFile); err != nil {
		_ = s.Stop()
		out, _ := os.ReadFile(logFile.Name())
		if bytes.Contains(out, []byte("No module named")) {
			return nil, fmt.Errorf("moto: python3 cannot import moto's server: install it with pip install 'moto[server]' (%s)", lastLine(out))
		}
		return nil, fmt.Errorf("moto: %w: %s (see %s)", err, lastLine(out), logFile.Name())
	}
	return s, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func (s *Server) waitReady(ctx context.Context, portFile string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", ctx.Err())
		case <-s.exited:
			return fmt.Errorf("exited before it was ready: %v", s.waitErr)
		case <-tick.C:
		}
		if s.url == "" {
			b, err := os.ReadFile(portFile)
			if err != nil {
				continue
			}
			port, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return fmt.Errorf("bad port file: %w", err)
			}
			s.url = "http://127.0.0.1:" + strconv.Itoa(port)
		}
		if _, err := s.LifecycleCalls(ctx); err == nil {
			return nil
		}
	}
}

// URL is the server's base URL, http://127.0.0.1:PORT.
func (s *Server) URL() string { return s.url }

// Stop kills moto's process group and waits for it to exit. It is
// idempotent.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		_ = s.stdin.Close()
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		s.stopErr = s.log.Close()
	})
	return s.stopErr
}

// AWSConfig returns an SDK configuration for the emulator: region us-east-1,
// static credentials test/test, BaseEndpoint the server's URL and the
// standard retryer with 3 attempts. It reads nothing from the environment.
func (s *Server) AWSConfig() aws.Config {
	return aws.Config{
		Region:       Region,
		Credentials:  aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, "")),
		BaseEndpoint: aws.String(s.url),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 3 })
		},
	}
}

// RegisterLifecycleAction makes a lifecycle action active, as the Auto
// Scaling group would when an instance enters the hook's wait state.
func (s *Server) RegisterLifecycleAction(ctx context.Context, a LifecycleAction) error {
	body, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("registering lifecycle action: %w", err)
	}
	if err := s.do(ctx, http.MethodPost, "/node-drainer/lifecycle-actions", body, nil); err != nil {
		return fmt.Errorf("registering lifecycle action: %w", err)
	}
	return nil
}

// SetLifecycleState sets the instance's lifecycle state in its Auto Scaling
// group ("Warmed:Stopped", "InService", ...), as Auto Scaling would for a move
// moto does not make: into a warm pool and out of it.
func (s *Server) SetLifecycleState(ctx context.Context, asg, instanceID, state string) error {
	body, err := json.Marshal(map[string]string{"asg": asg, "instanceId": instanceID, "state": state})
	if err != nil {
		return err
	}
	if err := s.do(ctx, http.MethodPost, "/node-drainer/lifecycle-state", body, nil); err != nil {
		return fmt.Errorf("setting %s's lifecycle state %s: %w", instanceID, state, err)
	}
	return nil
}

// SetEKSCluster makes DescribeCluster of an existing EKS cluster answer this
// endpoint and certificate authority (base64 of the PEM, as EKS gives it);
// moto makes both up.
func (s *Server) SetEKSCluster(ctx context.Context, name, endpoint, caData string) error {
	body, err := json.Marshal(map[string]string{"name": name, "endpoint": endpoint, "caData": caData})
	if err != nil {
		return err
	}
	if err := s.do(ctx, http.MethodPost, "/node-drainer/eks-cluster", body, nil); err != nil {
		return fmt.Errorf("setting EKS cluster %s: %w", name, err)
	}
	return nil
}

// SetLambdaRuntime makes Lambda's Invoke of function (its name; "*": every
// function without a runtime of its own) go to the Invoke API at url (a
// lambdart.Runtime's Endpoint, or a server that starts one per function);
// url "" forgets it. moto alone would run the function in Docker.
func (s *Server) SetLambdaRuntime(ctx context.Context, function, url string) error {
	body, err := json.Marshal(map[string]string{"function": function, "url": url})
	if err != nil {
		return err
	}
	if err := s.do(ctx, http.MethodPost, "/node-drainer/lambda-runtime", body, nil); err != nil {
		return fmt.Errorf("setting the runtime of function %s: %w", function, err)
	}
	return nil
}

// LifecycleCalls returns every CompleteLifecycleAction and
// RecordLifecycleActionHeartbeat call since the start or the last Reset, in
// arrival order.
func (s *Server) LifecycleCalls(ctx context.Context) ([]LifecycleCall, error) {
	var calls []LifecycleCall
	if err := s.do(ctx, http.MethodGet, "/node-drainer/lifecycle-calls", nil, &calls); err != nil {
		return nil, fmt.Errorf("listing lifecycle calls: %w", err)
	}
	return calls, nil
}

// EndedActions returns every lifecycle action that ended since the start
// or the last Reset, in the order they ended.
func (s *Server) EndedActions(ctx context.Context) ([]EndedAction, error) {
	var ended []EndedAction
	if err := s.do(ctx, http.MethodGet, "/node-drainer/lifecycle-ended", nil, &ended); err != nil {
		return nil, fmt.Errorf("listing ended lifecycle actions: %w", err)
	}
	return ended, nil
}

// Reset clears all of moto's state, the active lifecycle actions and the
// recorded calls.
func (s *Server) Reset(ctx context.Context) error {
	if err := s.do(ctx, http.MethodPost, "/moto-api/reset", nil, nil); err != nil {
		return fmt.Errorf("resetting moto: %w", err)
	}
	return nil
}

func (s *Server) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}
