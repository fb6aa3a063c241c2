package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/smithy-go"
)

// fakeASG records calls and answers with the configured errors.
type fakeASG struct {
	mu          sync.Mutex
	completes   []*autoscaling.CompleteLifecycleActionInput
	heartbeats  []*autoscaling.RecordLifecycleActionHeartbeatInput
	completeErr error
	beatErr     error
	beatErrs    map[string]error // by hook
	hooks       *autoscaling.DescribeLifecycleHooksOutput
	hooksErr    error
}

func (f *fakeASG) CompleteLifecycleAction(_ context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.completes = append(f.completes, in)
	if f.completeErr != nil {
		return nil, f.completeErr
	}
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func (f *fakeASG) RecordLifecycleActionHeartbeat(_ context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, _ ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats = append(f.heartbeats, in)
	if f.beatErr != nil {
		return nil, f.beatErr
	}
	if err := f.beatErrs[aws.ToString(in.LifecycleHookName)]; err != nil {
		return nil, err
	}
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
}

func (f *fakeASG) DescribeLifecycleHooks(_ context.Context, _ *autoscaling.DescribeLifecycleHooksInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	if f.hooksErr != nil {
		return nil, f.hooksErr
	}
	if f.hooks == nil {
		return &autoscaling.DescribeLifecycleHooksOutput{}, nil
	}
	return f.hooks, nil
}

func (f *fakeASG) beats() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.heartbeats)
}

var act = Action{ASG: "eks-general", Hook: "node-drainer-terminate", Token: "c613620e-07e2-4ed2-a9e2-ef8258911ade", InstanceID: "i-0b1f6e8d2c4a9f371"}

func notActive(token string) error {
	return &smithy.GenericAPIError{Code: "ValidationError", Message: "No active Lifecycle Action found with token " + token, Fault: smithy.FaultClient}
}

func TestIsNotActive(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not active, by token", notActive(act.Token), true},
		{"not active, by instance", &smithy.GenericAPIError{Code: "ValidationError", Message: "No active Lifecycle Action found with instance ID i-0b1f6e8d2c4a9f371"}, true},
		{"wrapped", fmt.Errorf("completing: %w", notActive(act.Token)), true},
		{"operation error as the SDK wraps it", &smithy.OperationError{ServiceID: "Auto Scaling", OperationName: "CompleteLifecycleAction", Err: notActive(act.Token)}, true},
		// the hook deleted (an uninstall, a take-back): Auto Scaling answers
		// for the hook, not the action, which ended with it
		{"the hook gone", &smithy.GenericAPIError{Code: "ValidationError", Message: "No Lifecycle Hook found with name node-drainer-terminate in group nodes"}, true},
		{"the hook gone, as the SDK wraps it", &smithy.OperationError{ServiceID: "Auto Scaling", OperationName: "RecordLifecycleActionHeartbeat",
			Err: &smithy.GenericAPIError{Code: "ValidationError", Message: "No Lifecycle Hook found with name node-drainer-terminate in group nodes"}}, true},
		{"the hook gone, other code", &smithy.GenericAPIError{Code: "Throttling", Message: "No Lifecycle Hook found"}, false},
		{"other validation error", &smithy.GenericAPIError{Code: "ValidationError", Message: "AutoScalingGroup name not found"}, false},
		{"same message, other code", &smithy.GenericAPIError{Code: "Throttling", Message: "No active Lifecycle Action found"}, false},
		{"plain error with the message", errors.New("ValidationError: No active Lifecycle Action found"), false},
		{"throttled", &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsNotActive(tc.err); got != tc.want {
				t.Errorf("IsNotActive(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestComplete(t *testing.T) {
	boom := &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
	for _, tc := range []struct {
		name      string
		err       error
		result    Result
		completed bool
		wantErr   bool
	}{
		{"continue", nil, Continue, true, false},
		{"abandon", nil, Abandon, true, false},
		{"no longer active is done", notActive(act.Token), Continue, false, false},
		{"no longer active, wrapped", &smithy.OperationError{ServiceID: "Auto Scaling", OperationName: "CompleteLifecycleAction", Err: notActive(act.Token)}, Abandon, false, false},
		{"other failure", boom, Continue, false, true},
		{"the hook gone is done", &smithy.GenericAPIError{Code: "ValidationError", Message: "No Lifecycle Hook found with name node-drainer-terminate in group nodes"}, Continue, false, false},
		{"other validation failure", &smithy.GenericAPIError{Code: "ValidationError", Message: "AutoScalingGroup name not found - AutoScalingGroup nodes not found"}, Continue, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeASG{completeErr: tc.err}
			completed, err := Complete(context.Background(), f, act, tc.result)
			if completed != tc.completed || (err != nil) != tc.wantErr {
				t.Fatalf("Complete = %v, %v; want %v, error %v", completed, err, tc.completed, tc.wantErr)
			}
			if err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), "completing lifecycle action") || !strings.Contains(err.Error(), act.InstanceID) {
					t.Errorf("error %q: want the cause wrapped with the operation and instance", err)
				}
				if strings.Contains(err.Error(), act.Token) {
					t.Errorf("error %q carries the token", err)
				}
			}
			if len(f.completes) != 1 {
				t.Fatalf("want one call, got %d", len(f.completes))
			}
			in := f.completes[0]
			if aws.ToString(in.AutoScalingGroupName) != act.ASG || aws.ToString(in.LifecycleHookName) != act.Hook ||
				aws.ToString(in.LifecycleActionToken) != act.Token || aws.ToString(in.InstanceId) != act.InstanceID ||
				Result(aws.ToString(in.LifecycleActionResult)) != tc.result {
				t.Errorf("input %+v does not name the action and result %s", in, tc.result)
			}
		})
	}
}

func TestHeartbeat(t *testing.T) {
	f := &fakeASG{}
	if err := Heartbeat(context.Background(), f, act); err != nil {
		t.Fatal(err)
	}
	in := f.heartbeats[0]
	if aws.ToString(in.AutoScalingGroupName) != act.ASG || aws.ToString(in.LifecycleHookName) != act.Hook ||
		aws.ToString(in.LifecycleActionToken) != act.Token || aws.ToString(in.InstanceId) != act.InstanceID {
		t.Errorf("input %+v", in)
	}
	f.beatErr = notActive(act.Token)
	err := Heartbeat(context.Background(), f, act)
	if err == nil || !IsNotActive(err) {
		t.Errorf("heartbeat error %v: want the not-active error kept recognisable", err)
	}
}

func TestInterval(t *testing.T) {
	hook := func(name string, timeout *int32) types.LifecycleHook {
		return types.LifecycleHook{LifecycleHookName: aws.String(name), HeartbeatTimeout: timeout}
	}
	own, sib := act.Hook, "legacy-terminate"
	for _, tc := range []struct {
		name  string
		hooks []types.LifecycleHook
		names []string
		want  time.Duration
	}{
		{"half the hook's timeout", []types.LifecycleHook{hook(own, aws.Int32(300))}, []string{own}, 150 * time.Second},
		{"long hook", []types.LifecycleHook{hook(own, aws.Int32(7200))}, []string{own}, time.Hour},
		{"no such hook", nil, []string{own}, time.Minute},
		{"no timeout", []types.LifecycleHook{hook(own, nil)}, []string{own}, time.Minute},
		{"a sibling's shorter timeout", []types.LifecycleHook{hook(own, aws.Int32(300)), hook(sib, aws.Int32(60))}, []string{own, sib}, 30 * time.Second},
		{"a sibling's longer timeout", []types.LifecycleHook{hook(own, aws.Int32(60)), hook(sib, aws.Int32(300))}, []string{own, sib}, 30 * time.Second},
		{"own unlisted, a sibling shorter than the fallback", []types.LifecycleHook{hook(sib, aws.Int32(30))}, []string{own, sib}, 15 * time.Second},
		{"another hook is not counted", []types.LifecycleHook{hook(own, aws.Int32(300)), hook("other", aws.Int32(30))}, []string{own}, 150 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Interval(tc.hooks, tc.names, time.Minute); got != tc.want {
				t.Errorf("interval %s, want %s", got, tc.want)
			}
		})
	}
}

func TestHooks(t *testing.T) {
	listed := []types.LifecycleHook{{LifecycleHookName: aws.String(act.Hook)}, {LifecycleHookName: aws.String("legacy-terminate")}}
	f := &fakeASG{hooks: &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: listed}}
	if got, err := Hooks(context.Background(), f, act.ASG); err != nil || len(got) != 2 {
		t.Errorf("hooks %+v, %v: want the group's two", got, err)
	}
	f.hooksErr = errors.New("denied")
	if _, err := Hooks(context.Background(), f, act.ASG); err == nil || !errors.Is(err, f.hooksErr) || !strings.Contains(err.Error(), act.ASG) {
		t.Errorf("error %v: want the cause wrapped, naming the group", err)
	}
}

// Beat heartbeats every action; one no longer active is reported and
// dropped, another failure reported and kept.
func TestBeat(t *testing.T) {
	gone := Action{ASG: act.ASG, Hook: "legacy-terminate", InstanceID: act.InstanceID}
	flaky := Action{ASG: act.ASG, Hook: "flaky", InstanceID: act.InstanceID}
	f := &fakeASG{beatErrs: map[string]error{gone.Hook: notActive(""), flaky.Hook: errors.New("throttled")}}
	var reported []string
	kept, failed := Beat(context.Background(), f, []Action{act, gone, flaky}, func(a Action, _ error) { reported = append(reported, a.Hook) })
	if len(kept) != 2 || kept[0] != act || kept[1] != flaky || !failed {
		t.Errorf("kept %+v, failed %v: want the active and the failed one kept, a failure said", kept, failed)
	}
	if !slices.Equal(reported, []string{gone.Hook, flaky.Hook}) || f.beats() != 3 {
		t.Errorf("reported %v after %d heartbeats: want both failures, each action heartbeated", reported, f.beats())
	}
	if f.heartbeats[1].LifecycleActionToken != nil || aws.ToString(f.heartbeats[1].InstanceId) != act.InstanceID {
		t.Errorf("a sibling's heartbeat %+v: want it by the instance", f.heartbeats[1])
	}
}

func TestKeepAlive(t *testing.T) {
	f := &fakeASG{}
	stop := KeepAlive(context.Background(), f, nil, []Action{act}, 10*time.Millisecond, func(_ Action, err error) { t.Errorf("unexpected error: %v", err) })
	deadline := time.Now().Add(5 * time.Second)
	for f.beats() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	n := f.beats()
	if n < 3 {
		t.Fatalf("only %d heartbeats", n)
	}
	time.Sleep(50 * time.Millisecond)
	if f.beats() != n {
		t.Errorf("heartbeats after stop: %d then %d", n, f.beats())
	}
}

func TestKeepAliveReportsErrorsAndStopsWithContext(t *testing.T) {
	f := &fakeASG{beatErr: errors.New("throttled")}
	var mu sync.Mutex
	var errs []error
	ctx, cancel := context.WithCancel(context.Background())
	stop := KeepAlive(ctx, f, nil, []Action{act}, 10*time.Millisecond, func(_ Action, err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	deadline := time.Now().Add(5 * time.Second)
	for f.beats() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	stop() // returns once the loop is done, after ctx ended too
	mu.Lock()
	defer mu.Unlock()
	if len(errs) == 0 || !strings.Contains(errs[0].Error(), "throttled") {
		t.Errorf("errors not reported: %v", errs)
	}
	n := f.beats()
	time.Sleep(40 * time.Millisecond)
	if f.beats() != n {
		t.Error("heartbeats after the context ended")
	}
}

func TestInService(t *testing.T) {
	for _, s := range types.LifecycleState("").Values() {
		want := s == types.LifecycleStateInService || strings.HasPrefix(string(s), "Pending")
		if got := InService(s); got != want {
			t.Errorf("InService(%s) = %v, want %v", s, got, want)
		}
	}
}

type fakeGroups struct {
	out *autoscaling.DescribeAutoScalingGroupsOutput
	err error
	in  *autoscaling.DescribeAutoScalingGroupsInput
}

func (f *fakeGroups) DescribeAutoScalingGroups(_ context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	f.in = in
	return f.out, f.err
}

func TestGroupState(t *testing.T) {
	f := &fakeGroups{out: &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: []types.AutoScalingGroup{{
		AutoScalingGroupName: aws.String("eks-general"),
		Instances: []types.Instance{
			{InstanceId: aws.String("i-1"), LifecycleState: types.LifecycleStateWarmedRunning},
			{InstanceId: aws.String(act.InstanceID), LifecycleState: types.LifecycleStateInService},
		}}}}}
	got, err := GroupState(t.Context(), f, "eks-general", act.InstanceID)
	if err != nil || got != types.LifecycleStateInService || len(f.in.AutoScalingGroupNames) != 1 || f.in.AutoScalingGroupNames[0] != "eks-general" {
		t.Errorf("GroupState = %q, %v (asked %v); want InService of eks-general", got, err, f.in.AutoScalingGroupNames)
	}
	if got, err := GroupState(t.Context(), f, "eks-general", "i-absent"); got != "" || err != nil {
		t.Errorf("an instance the group does not list: %q, %v", got, err)
	}
	f.err = errors.New("Throttling")
	if _, err := GroupState(t.Context(), f, "eks-general", act.InstanceID); err == nil || !strings.Contains(err.Error(), "eks-general") {
		t.Errorf("a failed read: %v", err)
	}
}

// lostThenEnded is an Auto Scaling whose first answer is a 500 when
// lost500 (an attempt sent, its answer lost) and every other answer "No
// active Lifecycle Action found"; calls counts what it was asked.
func lostThenEnded(t *testing.T, lost500 bool, retryer aws.Retryer) (api *autoscaling.Client, calls *atomic.Int32) {
	calls = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/xml")
		if calls.Add(1) == 1 && lost500 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`<ErrorResponse><Error><Type>Receiver</Type><Code>InternalFailure</Code><Message>x</Message></Error><RequestId>r</RequestId></ErrorResponse>`))
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`<ErrorResponse><Error><Type>Sender</Type><Code>ValidationError</Code><Message>No active Lifecycle Action found with instance ID i-1</Message></Error><RequestId>r</RequestId></ErrorResponse>`))
	}))
	t.Cleanup(srv.Close)
	return autoscaling.New(autoscaling.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""), Retryer: retryer}), calls
}

// A completion whose first attempt failed after it was sent (a 500 here,
// or a connection dropped) and whose retry finds the action no longer
// active was most likely this call's own: reported completed. One whose
// first and only attempt finds it no longer active is not.
func TestCompleteRetriedAfterALostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost bool // the first answer a 500 (else: not active at once)
		want bool
	}{
		{"first attempt lost, the retry finds it ended", true, true},
		{"not active at the first attempt", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, calls := lostThenEnded(t, tc.lost, retry.NewStandard(func(o *retry.StandardOptions) {
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
			}))
			got, err := Complete(context.Background(), api, Action{ASG: "g", Hook: "h", InstanceID: "i-1"}, Continue)
			if err != nil || got != tc.want {
				t.Errorf("Complete = %v, %v after %d calls; want %v", got, err, calls.Load(), tc.want)
			}
		})
	}
}

// A completion tried again by its caller (the handler's backoff after the
// SDK's retries are spent, a sibling's) holds the same rule: a Try after
// one that failed, finding the action no longer active, is taken as the
// completion's own.
func TestCompletionTriedAgainAfterALostAnswer(t *testing.T) {
	api, calls := lostThenEnded(t, true, aws.NopRetryer{}) // the SDK does not try again: the caller does
	c := NewCompletion(api, Action{ASG: "g", Hook: "h", InstanceID: "i-1"}, Continue)
	if got, err := c.Try(context.Background()); got || err == nil {
		t.Fatalf("first Try = %v, %v; want the 500's error", got, err)
	}
	if got, err := c.Try(context.Background()); !got || err != nil {
		t.Errorf("second Try = %v, %v after %d calls; want true (the first may have landed)", got, err, calls.Load())
	}
	if got, err := NewCompletion(api, Action{ASG: "g", Hook: "h", InstanceID: "i-1"}, Continue).Try(context.Background()); got || err != nil {
		t.Errorf("a new completion's first Try finding it not active = %v, %v; want false", got, err)
	}
}
