package instance

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	clocktesting "k8s.io/utils/clock/testing"
)

const id = "i-0b1f6e8d2c4a9f371"

// fakeEC2 answers DescribeInstances with one step of a script per call (the
// last step repeats).
type fakeEC2 struct {
	mu    sync.Mutex
	steps []step
	calls []*ec2.DescribeInstancesInput
}

type step struct {
	out *ec2.DescribeInstancesOutput
	err error
}

func (f *fakeEC2) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, in)
	s := f.steps[min(len(f.calls), len(f.steps))-1]
	return s.out, s.err
}

func described(insts ...types.Instance) step {
	return step{out: &ec2.DescribeInstancesOutput{Reservations: []types.Reservation{{Instances: insts}}}}
}

func ec2Instance(instanceID string, state types.InstanceStateName) types.Instance {
	return types.Instance{
		InstanceId:     aws.String(instanceID),
		State:          &types.InstanceState{Name: state},
		PrivateDnsName: aws.String("ip-10-0-1-23.ec2.internal"),
		Placement:      &types.Placement{AvailabilityZone: aws.String("us-east-1a")},
		Tags: []types.Tag{
			{Key: aws.String("kubernetes.io/cluster/prod"), Value: aws.String("owned")},
			{Key: aws.String("aws:autoscaling:groupName"), Value: aws.String("eks-general")},
			{Key: aws.String("empty"), Value: nil},
		},
	}
}

func notFound() error {
	return &smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound", Message: "The instance ID '" + id + "' does not exist"}
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		step    step
		found   bool
		state   State
		wantErr bool
	}{
		{"running", described(ec2Instance(id, types.InstanceStateNameRunning)), true, "running", false},
		{"pending", described(ec2Instance(id, types.InstanceStateNamePending)), true, "pending", false},
		{"stopping", described(ec2Instance(id, types.InstanceStateNameStopping)), true, "stopping", false},
		{"stopped", described(ec2Instance(id, types.InstanceStateNameStopped)), true, "stopped", false},
		{"shutting-down", described(ec2Instance(id, types.InstanceStateNameShuttingDown)), true, "shutting-down", false},
		{"terminated", described(ec2Instance(id, types.InstanceStateNameTerminated)), true, "terminated", false},
		{"not found error", step{err: notFound()}, false, "", false},
		{"not found, wrapped by the SDK", step{err: &smithy.OperationError{ServiceID: "EC2", OperationName: "DescribeInstances", Err: notFound()}}, false, "", false},
		{"no reservations", step{out: &ec2.DescribeInstancesOutput{}}, false, "", false},
		{"another instance only", described(ec2Instance("i-0fedcba9876543210", types.InstanceStateNameStopped)), false, "", false},
		{"ours among others", described(ec2Instance("i-0fedcba9876543210", types.InstanceStateNameStopped), ec2Instance(id, types.InstanceStateNameRunning)), true, "running", false},
		{"access denied", step{err: &smithy.GenericAPIError{Code: "UnauthorizedOperation", Message: "not authorized"}}, false, "", true},
		{"network", step{err: errors.New("dial tcp: i/o timeout")}, false, "", true},
		{"malformed id", step{err: &smithy.GenericAPIError{Code: "InvalidInstanceID.Malformed", Message: "Invalid id"}}, false, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEC2{steps: []step{tc.step}}
			before := time.Now()
			i, err := Describe(context.Background(), f, nil, id)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Describe error %v, want error %v", err, tc.wantErr)
			}
			if len(f.calls) != 1 || len(f.calls[0].InstanceIds) != 1 || f.calls[0].InstanceIds[0] != id {
				t.Errorf("calls %+v: want one DescribeInstances of %s", f.calls, id)
			}
			if err != nil {
				if !errors.Is(err, tc.step.err) || !strings.Contains(err.Error(), id) {
					t.Errorf("error %q: want the cause wrapped with the instance", err)
				}
				return
			}
			if i.ID != id || i.Found != tc.found || i.State != tc.state {
				t.Errorf("got %+v, want found=%v state=%q", i, tc.found, tc.state)
			}
			if i.SeenAt.Before(before) {
				t.Errorf("SeenAt %v not set", i.SeenAt)
			}
			if tc.found {
				if i.PrivateDNSName != "ip-10-0-1-23.ec2.internal" || i.Zone != "us-east-1a" {
					t.Errorf("dns %q zone %q", i.PrivateDNSName, i.Zone)
				}
				if !i.HasTag("kubernetes.io/cluster/prod") || !i.HasTag("empty") || i.HasTag("kubernetes.io/cluster/other") {
					t.Errorf("tags %v", i.Tags)
				}
			}
		})
	}
}

func TestDescribeMissingFields(t *testing.T) {
	f := &fakeEC2{steps: []step{described(types.Instance{InstanceId: aws.String(id)})}}
	i, err := Describe(context.Background(), f, nil, id)
	if err != nil {
		t.Fatal(err)
	}
	if !i.Found || i.State != "" || i.PrivateDNSName != "" || i.Zone != "" || i.HasTag("x") {
		t.Errorf("got %+v", i)
	}
	if i.Down() || i.GoingDown() {
		t.Errorf("an instance without a state must not read as down: %+v", i)
	}
}

func TestDownAndGoingDown(t *testing.T) {
	for _, tc := range []struct {
		name      string
		i         Instance
		down      bool
		goingDown bool
	}{
		{"pending", read(Instance{Found: true, State: "pending"}), false, false},
		{"running", read(Instance{Found: true, State: "running"}), false, false},
		{"stopping", read(Instance{Found: true, State: "stopping"}), false, true},
		{"stopped", read(Instance{Found: true, State: "stopped"}), true, false},
		{"shutting-down", read(Instance{Found: true, State: "shutting-down"}), false, true},
		{"terminated", read(Instance{Found: true, State: "terminated"}), true, false},
		{"unknown to EC2", read(Instance{Found: false}), true, false},
		{"no state", read(Instance{Found: true}), false, false},
		{"capitalised state", read(Instance{Found: true, State: "Stopped"}), false, false},
		{"unknown state", read(Instance{Found: true, State: "hibernated"}), false, false},
		{"zero value: no reading", Instance{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.i.Down(); got != tc.down {
				t.Errorf("Down() = %v, want %v", got, tc.down)
			}
			if got := tc.i.GoingDown(); got != tc.goingDown {
				t.Errorf("GoingDown() = %v, want %v", got, tc.goingDown)
			}
		})
	}
}

func TestString(t *testing.T) {
	at := time.Date(2026, 11, 19, 8, 31, 4, 0, time.FixedZone("CET", 3600))
	if got, want := (Instance{ID: id, Found: true, State: "stopped", SeenAt: at}).String(),
		"EC2 reports instance "+id+" stopped (as of 2026-11-19T07:31:04Z)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := (Instance{ID: id, SeenAt: at}).String(), "EC2 reports no instance "+id+" (as of 2026-11-19T07:31:04Z)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

func TestWaitDown(t *testing.T) {
	stopping := described(ec2Instance(id, types.InstanceStateNameStopping))
	stopped := described(ec2Instance(id, types.InstanceStateNameStopped))
	running := described(ec2Instance(id, types.InstanceStateNameRunning))
	for _, tc := range []struct {
		name    string
		steps   []step
		timeout time.Duration
		state   State
		found   bool
		wantErr bool
	}{
		{"stops", []step{stopping, stopping, stopped}, 5 * time.Second, "stopped", true, false},
		{"already stopped", []step{stopped}, 5 * time.Second, "stopped", true, false},
		{"gone while waiting", []step{stopping, {err: notFound()}}, 5 * time.Second, "", false, false},
		{"back to running", []step{stopping, running}, 5 * time.Second, "running", true, false},
		{"still stopping at the timeout", []step{stopping}, 50 * time.Millisecond, "stopping", true, false},
		{"unreadable", []step{stopping, {err: errors.New("throttled")}}, 5 * time.Second, "", false, true},
		{"unreadable from the start", []step{{err: errors.New("throttled")}}, 5 * time.Second, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEC2{steps: tc.steps}
			i, err := WaitDown(context.Background(), f, nil, id, 5*time.Millisecond, tc.timeout)
			if (err != nil) != tc.wantErr {
				t.Fatalf("WaitDown error %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				if !strings.Contains(err.Error(), "throttled") {
					t.Errorf("error %q does not carry the cause", err)
				}
				return
			}
			if i.State != tc.state || i.Found != tc.found {
				t.Errorf("got %+v, want state %q found %v", i, tc.state, tc.found)
			}
		})
	}
}

func TestWaitDownContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &fakeEC2{steps: []step{described(ec2Instance(id, types.InstanceStateNameStopping))}}
	i, err := WaitDown(ctx, f, nil, id, 5*time.Millisecond, time.Second)
	if err == nil && i.Down() {
		t.Errorf("a cancelled wait returned a down instance without error: %+v", i)
	}
}

// read fills in what Describe sets on every reading.
func read(i Instance) Instance {
	i.ID, i.SeenAt = "i-0123456789abcdef0", time.Unix(1700000000, 0)
	return i
}

// TestListChunksAndOrdersFilters: values go 200 to a call, each call with the
// extra filters first (an emulator that tests filters in order then tests the
// state before scanning tags), and the readings of all calls are merged.
func TestListChunksAndOrdersFilters(t *testing.T) {
	f := &fakeEC2{steps: []step{described(ec2Instance("i-1", types.InstanceStateNameStopped)), described(ec2Instance("i-2", types.InstanceStateNameTerminated))}}
	values := make([]string, 250)
	for i := range values {
		values[i] = "v"
	}
	got, err := List(context.Background(), f, nil, "tag-key", values, NotRunning())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["i-1"].State != StateStopped || got["i-2"].State != StateTerminated {
		t.Fatalf("readings = %v, want i-1 stopped and i-2 terminated", got)
	}
	if len(f.calls) != 2 {
		t.Fatalf("%d calls, want 2 (250 values, 200 a call)", len(f.calls))
	}
	for i, want := range []int{200, 50} {
		fs := f.calls[i].Filters
		if len(fs) != 2 || aws.ToString(fs[0].Name) != "instance-state-name" || aws.ToString(fs[1].Name) != "tag-key" || len(fs[1].Values) != want {
			t.Fatalf("call %d filters = %+v, want instance-state-name then tag-key with %d values", i, fs, want)
		}
	}
}

// TestListFailsWhole: a failed page fails the whole reading.
func TestListFailsWhole(t *testing.T) {
	f := &fakeEC2{steps: []step{described(ec2Instance("i-1", types.InstanceStateNameStopped)), {err: errors.New("throttled")}}}
	values := make([]string, 201)
	if got, err := List(context.Background(), f, nil, "instance-id", values); err == nil || !strings.Contains(err.Error(), "describing instances by instance-id") {
		t.Fatalf("List = %v, %v; want the second call's error", got, err)
	}
}

// hibernating is ec2Instance in state, with EC2's state reason code and, when
// configured, hibernation enabled at launch.
func hibernating(state types.InstanceStateName, reason string, configured bool) types.Instance {
	in := ec2Instance(id, state)
	if reason != "" {
		in.StateReason = &types.StateReason{Code: aws.String(reason), Message: aws.String(reason + ": from EC2")}
	}
	if configured {
		in.HibernationOptions = &types.HibernationOptions{Configured: aws.Bool(true)}
	}
	in.InstanceLifecycle = types.InstanceLifecycleTypeSpot
	return in
}

// TestHibernatedIsNotDown: an instance stopped by a hibernation resumes with
// its memory — its processes and the volumes they had mounted — so it is not
// down for forcing, nor going down, and its evidence line says why; a plain
// stop, a terminated instance and a running one keep their usual reading.
func TestHibernatedIsNotDown(t *testing.T) {
	stopped, stopping := types.InstanceStateNameStopped, types.InstanceStateNameStopping
	for _, tc := range []struct {
		name                  string
		in                    types.Instance
		hibernated, down, gng bool
	}{
		{"hibernated by the user", hibernating(stopped, ReasonUserHibernate, true), true, false, false},
		{"hibernating by the user", hibernating(stopping, ReasonUserHibernate, true), true, false, false},
		{"hibernated by a spot interruption", hibernating(stopped, ReasonSpotShutdown, true), true, false, false},
		{"hibernating by a spot interruption", hibernating(stopping, ReasonSpotShutdown, true), true, false, false},
		{"stopped by a spot interruption, hibernation not configured", hibernating(stopped, ReasonSpotShutdown, false), false, true, false},
		{"stopped by the user, hibernation configured", hibernating(stopped, "Client.UserInitiatedShutdown", true), false, true, false},
		{"stopping by the user", hibernating(stopping, "Client.UserInitiatedShutdown", true), false, false, true},
		{"stopped, no reason given", hibernating(stopped, "", true), false, true, false},
		{"running again after a hibernation (stale reason)", hibernating(types.InstanceStateNameRunning, ReasonUserHibernate, true), false, false, false},
		{"terminated", hibernating(types.InstanceStateNameTerminated, "Client.UserInitiatedShutdown", true), false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEC2{steps: []step{described(tc.in)}}
			i, err := Describe(context.Background(), f, nil, id)
			if err != nil {
				t.Fatal(err)
			}
			if i.Hibernated != tc.hibernated || i.Down() != tc.down || i.GoingDown() != tc.gng {
				t.Errorf("%+v: Hibernated=%v Down()=%v GoingDown()=%v, want %v %v %v",
					i, i.Hibernated, i.Down(), i.GoingDown(), tc.hibernated, tc.down, tc.gng)
			}
			if tc.in.StateReason != nil && i.StateReason != aws.ToString(tc.in.StateReason.Code) {
				t.Errorf("StateReason %q, want %q", i.StateReason, aws.ToString(tc.in.StateReason.Code))
			}
			if got := strings.Contains(i.String(), "hibernated"); got != tc.hibernated {
				t.Errorf("String() = %q: says hibernated %v, want %v", i.String(), got, tc.hibernated)
			}
		})
	}
}

// TestListReadsHibernation: the sweep's batched reading tells a hibernated
// instance apart too.
func TestListReadsHibernation(t *testing.T) {
	f := &fakeEC2{steps: []step{described(hibernating(types.InstanceStateNameStopped, ReasonUserHibernate, true))}}
	got, err := List(context.Background(), f, nil, "instance-id", []string{id})
	if err != nil {
		t.Fatal(err)
	}
	if i := got[id]; !i.Hibernated || i.Down() {
		t.Errorf("%+v: want hibernated, not down", i)
	}
}

// TestWaitDownEndsOnHibernation: a hibernation is not waited out as if it
// ended in down: the wait returns at once with the hibernating reading.
func TestWaitDownEndsOnHibernation(t *testing.T) {
	f := &fakeEC2{steps: []step{described(hibernating(types.InstanceStateNameStopping, ReasonUserHibernate, true))}}
	i, err := WaitDown(context.Background(), f, nil, id, 5*time.Millisecond, 5*time.Second)
	if err != nil || !i.Hibernated || i.Down() || len(f.calls) != 1 {
		t.Errorf("WaitDown = %+v, %v after %d calls: want the hibernating reading at once, not down", i, err, len(f.calls))
	}
}

// WaitDown polls on its clock: no second reading while the clock stands
// still, one per interval stepped; what it sees is stamped with the clock.
func TestWaitDownOnItsClock(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(at)
	f := &fakeEC2{steps: []step{described(ec2Instance(id, types.InstanceStateNameStopping)), described(ec2Instance(id, types.InstanceStateNameStopped))}}
	type result struct {
		i   Instance
		err error
	}
	done := make(chan result, 1)
	go func() {
		i, err := WaitDown(context.Background(), f, clk, id, 2*time.Second, time.Minute)
		done <- result{i, err}
	}()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	f.mu.Lock()
	calls := len(f.calls)
	f.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d readings while the clock stood still, want 1", calls)
	}
	clk.Step(2 * time.Second)
	r := <-done
	if r.err != nil || r.i.State != StateStopped || !r.i.SeenAt.Equal(at.Add(2*time.Second)) {
		t.Errorf("WaitDown = %+v, %v: want stopped, seen at %v", r.i, r.err, at.Add(2*time.Second))
	}
}

// TestInReservation: a Capacity Block's instances are read by its
// reservation id, only those of this cluster (its tag key) and only those
// running or starting; each reading says the reservation it runs in.
func TestInReservation(t *testing.T) {
	in := ec2Instance("i-0f3c9a2e7b5d1c846", types.InstanceStateNameRunning)
	in.CapacityReservationId = aws.String("cr-0d4b8f2a6c1e9e357")
	f := &fakeEC2{steps: []step{described(in)}}
	got, err := InReservation(context.Background(), f, nil, "cr-0d4b8f2a6c1e9e357", "kubernetes.io/cluster/prod")
	if err != nil {
		t.Fatal(err)
	}
	if i := got["i-0f3c9a2e7b5d1c846"]; len(got) != 1 || i.CapacityReservationID != "cr-0d4b8f2a6c1e9e357" || i.State != StateRunning {
		t.Fatalf("readings = %+v, want the one running instance of cr-0d4b8f2a6c1e9e357", got)
	}
	if len(f.calls) != 1 {
		t.Fatalf("%d calls, want 1", len(f.calls))
	}
	filters := map[string][]string{}
	var order []string
	for _, fl := range f.calls[0].Filters {
		filters[aws.ToString(fl.Name)] = fl.Values
		order = append(order, aws.ToString(fl.Name))
	}
	want := map[string][]string{
		"instance-state-name":     {"pending", "running"},
		"tag-key":                 {"kubernetes.io/cluster/prod"},
		"capacity-reservation-id": {"cr-0d4b8f2a6c1e9e357"},
	}
	if !reflect.DeepEqual(filters, want) || order[len(order)-1] != "capacity-reservation-id" {
		t.Errorf("filters %v (in order %v), want %v with the reservation last", filters, order, want)
	}
}
