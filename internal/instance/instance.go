// Package instance is the EC2 view of an instance: its state, private DNS name
// and tags, read with DescribeInstances. It is the evidence the abrupt path
// needs before forcing anything: only an instance EC2 reports stopped (and
// not hibernated), terminated or gone is treated as down.
package instance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// EC2API is the part of EC2 the function uses.
type EC2API interface {
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
}

// State is an instance's state as EC2 names it.
type State string

// The instance states.
const (
	StatePending      = State(types.InstanceStateNamePending)
	StateRunning      = State(types.InstanceStateNameRunning)
	StateStopping     = State(types.InstanceStateNameStopping)
	StateStopped      = State(types.InstanceStateNameStopped)
	StateShuttingDown = State(types.InstanceStateNameShuttingDown)
	StateTerminated   = State(types.InstanceStateNameTerminated)
)

// The state reason codes (DescribeInstances StateReason.Code) that tell a
// hibernation from a plain stop.
const (
	// ReasonUserHibernate: hibernation was initiated on the instance
	// (StopInstances with Hibernate).
	ReasonUserHibernate = "Client.UserInitiatedHibernate"
	// ReasonSpotShutdown: a Spot interruption stopped the instance — or
	// hibernated it, when the instance is configured for hibernation (its
	// interruption behaviour is then hibernate, and only that).
	ReasonSpotShutdown = "Server.SpotInstanceShutdown"
)

// Instance is what EC2 says of one instance at one moment.
type Instance struct {
	ID             string
	Found          bool // false: EC2 does not know it (terminated long ago, or never ours)
	State          State
	PrivateDNSName string
	Zone           string
	Tags           map[string]string
	SeenAt         time.Time
	// StateReason is the code of EC2's reason for the last state change
	// ("" when EC2 gave none).
	StateReason string
	// Hibernated: the instance is stopping or stopped by a hibernation. Its
	// memory — its processes, with the volumes they had mounted — comes back
	// when it starts, so it is never down for forcing (see Down).
	Hibernated bool
	// CapacityReservationID is the Capacity Reservation the instance runs
	// in ("" when none).
	CapacityReservationID string
}

// TagGroupName is the tag Auto Scaling puts on each instance it launches:
// the name of its group.
const TagGroupName = "aws:autoscaling:groupName"

// Group is the name of the instance's Auto Scaling group, from its tags (""
// when it is in none, or the tags were not read).
func (i Instance) Group() string { return i.Tags[TagGroupName] }

// HasTag reports whether the instance carries the tag key.
func (i Instance) HasTag(key string) bool {
	_, ok := i.Tags[key]
	return ok
}

// Down reports whether EC2 confirms the instance cannot be running workloads
// now or later: stopped (not hibernated), terminated, or unknown to EC2. The
// zero Instance (no reading) is never down. A hibernated instance is not
// down: its processes resume with their RAM when it starts, and would write
// to volumes a replacement was given meanwhile.
func (i Instance) Down() bool {
	if i.ID == "" || i.SeenAt.IsZero() || i.Hibernated {
		return false
	}
	return !i.Found || i.State == StateStopped || i.State == StateTerminated
}

// GoingDown reports a transition that ends in Down: a hibernation does not.
func (i Instance) GoingDown() bool {
	return i.Found && !i.Hibernated && (i.State == StateStopping || i.State == StateShuttingDown)
}

// String is the evidence line logged and recorded with destructive actions
// (and with their refusal).
func (i Instance) String() string {
	at := i.SeenAt.UTC().Format(time.RFC3339)
	switch {
	case !i.Found:
		return fmt.Sprintf("EC2 reports no instance %s (as of %s)", i.ID, at)
	case i.Hibernated:
		return fmt.Sprintf("EC2 reports instance %s %s, hibernated (%s): its memory, processes and mounts resume when it starts (as of %s)",
			i.ID, i.State, i.StateReason, at)
	}
	return fmt.Sprintf("EC2 reports instance %s %s (as of %s)", i.ID, i.State, at)
}

// hibernated says whether EC2's description is of a hibernation: an
// instance stopping or stopped because hibernation was asked for, or because
// a Spot interruption stopped an instance configured for hibernation (whose
// interruption behaviour is then hibernate). EC2 does not say whether a
// hibernation fell back to a plain stop: it counts as a hibernation.
func hibernated(in types.Instance) bool {
	if in.State == nil || (in.State.Name != types.InstanceStateNameStopping && in.State.Name != types.InstanceStateNameStopped) ||
		in.StateReason == nil {
		return false
	}
	switch deref(in.StateReason.Code) {
	case ReasonUserHibernate:
		return true
	case ReasonSpotShutdown:
		return in.HibernationOptions != nil && aws.ToBool(in.HibernationOptions.Configured)
	}
	return false
}

// Describe reads one instance, seen at clk's now (nil: the real clock). An
// instance EC2 does not know is returned with Found false and no error; any
// other failure is an error (state unreadable).
func Describe(ctx context.Context, api EC2API, clk clock.PassiveClock, id string) (Instance, error) {
	out, err := api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	now := orReal(clk).Now()
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "InvalidInstanceID.NotFound" {
		return Instance{ID: id, SeenAt: now}, nil
	}
	if err != nil {
		return Instance{}, fmt.Errorf("describing instance %s: %w", id, err)
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if in.InstanceId != nil && *in.InstanceId == id {
				return fromEC2(in, now), nil
			}
		}
	}
	return Instance{ID: id, SeenAt: now}, nil
}

// fromEC2 is EC2's description of one instance, seen at now.
func fromEC2(in types.Instance, now time.Time) Instance {
	i := Instance{ID: deref(in.InstanceId), Found: true, SeenAt: now, Tags: map[string]string{}}
	if in.State != nil {
		i.State = State(in.State.Name)
	}
	if in.StateReason != nil {
		i.StateReason = deref(in.StateReason.Code)
	}
	i.Hibernated = hibernated(in)
	i.PrivateDNSName = deref(in.PrivateDnsName)
	i.CapacityReservationID = deref(in.CapacityReservationId)
	if in.Placement != nil {
		i.Zone = deref(in.Placement.AvailabilityZone)
	}
	for _, t := range in.Tags {
		if t.Key != nil {
			i.Tags[*t.Key] = deref(t.Value)
		}
	}
	return i
}

// filterValuesPerCall bounds the values of one DescribeInstances filter.
const filterValuesPerCall = 200

// List reads every instance that filter (an EC2 filter name such as
// instance-id, private-dns-name or tag-key) selects among values, in as few
// paginated calls as EC2 allows, with the filters and (all must match); the
// result is by instance id. It is complete or an error: a failed page fails
// the whole reading.
//
// The filters and go first in each call. EC2 gives their order no meaning,
// but an emulator that tests them in order, stopping at the first that fails
// (moto, the harness's), then tests the cheap state filter before a tag
// filter it answers by scanning every tag it holds: for 2,000 instances that
// was 10 s of a sweep. Each instance is seen at clk's now (nil: the real
// clock).
func List(ctx context.Context, api EC2API, clk clock.PassiveClock, filter string, values []string, and ...types.Filter) (map[string]Instance, error) {
	all := map[string]Instance{}
	for start := 0; start < len(values); start += filterValuesPerCall {
		chunk := values[start:min(start+filterValuesPerCall, len(values))]
		p := ec2.NewDescribeInstancesPaginator(api, &ec2.DescribeInstancesInput{
			Filters:    append(slices.Clip(and), types.Filter{Name: aws.String(filter), Values: chunk}),
			MaxResults: aws.Int32(1000),
		})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("describing instances by %s: %w", filter, err)
			}
			now := orReal(clk).Now()
			for _, r := range out.Reservations {
				for _, in := range r.Instances {
					if in.InstanceId != nil {
						all[*in.InstanceId] = fromEC2(in, now)
					}
				}
			}
		}
	}
	return all, nil
}

// NotRunning is the filter of the instances that are not running (the
// states an instance leaves running by).
func NotRunning() types.Filter {
	return types.Filter{Name: aws.String("instance-state-name"), Values: []string{
		string(StatePending), string(StateStopping), string(StateStopped), string(StateShuttingDown), string(StateTerminated)}}
}

// InReservation reads the instances carrying the tag key clusterTag that
// are running or pending in the Capacity Reservation reservationID: those
// whose workloads the reservation's end takes (a Capacity Block's). The
// filter on the cluster's tag keeps other clusters' instances out of the
// reading (safety rule 4: act only on this cluster's instances); the state
// and tag filters go first (see List).
func InReservation(ctx context.Context, api EC2API, clk clock.PassiveClock, reservationID, clusterTag string) (map[string]Instance, error) {
	live := types.Filter{Name: aws.String("instance-state-name"), Values: []string{string(StatePending), string(StateRunning)}}
	tagged := types.Filter{Name: aws.String("tag-key"), Values: []string{clusterTag}}
	return List(ctx, api, clk, "capacity-reservation-id", []string{reservationID}, live, tagged)
}

// Gone is the reading of an instance EC2 did not list: unknown to it.
func Gone(id string, seenAt time.Time) Instance { return Instance{ID: id, SeenAt: seenAt} }

// WaitDown polls EC2 while the instance is stopping or shutting down, until it
// is down or timeout passes on clk (nil: the real clock), or ctx ends; it
// returns the last state seen. An unreadable state ends the wait with an
// error. The calls themselves are bounded by a context deadline, which runs
// on the real clock.
func WaitDown(ctx context.Context, api EC2API, clk clock.WithTicker, id string, interval, timeout time.Duration) (Instance, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	end := clk.NewTimer(timeout)
	defer end.Stop()
	tick := clk.NewTicker(interval)
	defer tick.Stop()
	var last Instance
	for {
		i, err := Describe(ctx, api, clk, id)
		if err != nil {
			if last.ID != "" && wait.Interrupted(err) {
				return last, nil
			}
			return last, err
		}
		last = i
		if !i.GoingDown() {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, nil
		case <-end.C():
			return last, nil
		case <-tick.C():
		}
	}
}

// orReal is clk, or the real clock when clk is nil.
func orReal(clk clock.PassiveClock) clock.PassiveClock {
	if clk == nil {
		return clock.RealClock{}
	}
	return clk
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
