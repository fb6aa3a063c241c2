package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Kind says what happened to the instances an Event concerns.
type Kind string

// The kinds of event node-drainer understands.
const (
	// KindTerminate: an ASG terminate lifecycle hook holds the instance in
	// Terminating:Wait (aws.autoscaling, EC2 Instance-terminate Lifecycle Action).
	KindTerminate Kind = "terminate"
	// KindLaunch: an ASG launch lifecycle hook holds the instance in
	// Pending:Wait (aws.autoscaling, EC2 Instance-launch Lifecycle Action).
	KindLaunch Kind = "launch"
	// KindSpotInterruption: EC2 reclaims the spot instance in about two
	// minutes (aws.ec2, EC2 Spot Instance Interruption Warning).
	KindSpotInterruption Kind = "spot-interruption"
	// KindCapacityInterruption: EC2 reclaims the instance of an
	// interruptible Capacity Reservation in about two minutes (aws.ec2, EC2
	// Capacity Reservation Instance Interruption Warning).
	KindCapacityInterruption Kind = "capacity-reservation-interruption"
	// KindCapacityBlockExpiry: a Capacity Block ends in 40 minutes, and its
	// instances begin to terminate in 10 (aws.ec2, Capacity Block
	// Expiration Warning, or Capacity Block Reservation Expiration Warning).
	// It names the reservation, not its instances: the handler looks them
	// up.
	KindCapacityBlockExpiry Kind = "capacity-block-expiration"
	// KindRebalance: the spot instance is at elevated risk of interruption
	// (aws.ec2, EC2 Instance Rebalance Recommendation).
	KindRebalance Kind = "rebalance-recommendation"
	// KindStateChange: the instance entered Event.State (aws.ec2, EC2
	// Instance State-change Notification).
	KindStateChange Kind = "state-change"
	// KindScheduledChange: AWS scheduled maintenance or retirement of the
	// instances (aws.health, AWS Health Event, service EC2, category
	// scheduledChange).
	KindScheduledChange Kind = "scheduled-change"
	// KindSweep: the sweep's schedule fired (aws.events, Scheduled Event):
	// reconcile what events missed. It concerns no instance of its own.
	KindSweep Kind = "sweep"
	// KindTestNotification: the test message Auto Scaling sends when a
	// lifecycle hook is created (autoscaling:TEST_NOTIFICATION). Ignore it.
	KindTestNotification Kind = "test-notification"

	// KindStackResource is not an EventBridge event: CloudFormation's
	// request to the stack's Custom::LifecycleHooks resource (SAM), or the
	// terraform module's aws_lambda_invocation of the same, which the
	// handler serves before any event is parsed.
	KindStackResource Kind = "stack-resource"
	// KindUnknown: an event node-drainer does not handle (another source,
	// detail-type, Health service or category). Ignore it.
	KindUnknown Kind = "unknown"
)

// Actionable reports whether events of this kind concern instances
// node-drainer acts upon. An actionable Event always has at least one
// valid instance id, but a KindCapacityBlockExpiry, which may name only its
// reservation.
func (k Kind) Actionable() bool {
	switch k {
	case KindTerminate, KindLaunch, KindSpotInterruption, KindCapacityInterruption, KindCapacityBlockExpiry,
		KindRebalance, KindStateChange, KindScheduledChange:
		return true
	}
	return false
}

// Event is a validated EventBridge event. Which of the kind-specific fields
// is set depends on Kind; the others are nil or empty.
type Event struct {
	Kind Kind

	// From the EventBridge envelope: ID identifies the event (duplicate
	// deliveries share it), Time is when it was emitted.
	ID         string
	Source     string
	DetailType string
	Time       time.Time
	Region     string
	Account    string

	// InstanceIDs are the EC2 instances the event concerns, without
	// duplicates: exactly one for every actionable kind but
	// KindScheduledChange, which may list several, and
	// KindCapacityBlockExpiry, which lists none (one when a continuation
	// narrowed it to an instance of the block). Empty when the kind is not
	// actionable.
	InstanceIDs []string

	// Lifecycle is set for KindTerminate and KindLaunch.
	Lifecycle *LifecycleAction
	// Spot is set for KindSpotInterruption.
	Spot *SpotInterruption
	// Capacity is set for KindCapacityInterruption.
	Capacity *CapacityInterruption
	// CapacityBlock is set for KindCapacityBlockExpiry.
	CapacityBlock *CapacityBlockExpiry
	// State is set for KindStateChange, and always one of the InstanceState
	// constants.
	State InstanceState
	// Scheduled is set for KindScheduledChange.
	Scheduled *ScheduledChange
	// Shard is set for a KindSweep that is one shard of a pass split across
	// invocations (nil: the scheduled event itself).
	Shard *SweepShard
}

// ErrMalformed classifies every error Parse and ParseInvocation return: the
// payload is not a valid event of a kind node-drainer handles. Retrying
// cannot fix it; the handler does nothing with it.
var ErrMalformed = errors.New("malformed event")

// Parse decodes and validates one EventBridge event. See the package
// documentation for the three possible outcomes. On error the Event is the
// zero value.
func Parse(payload []byte) (Event, error) {
	ev, err := parse(payload)
	if err != nil {
		return Event{}, err
	}
	return ev, nil
}

func parse(payload []byte) (Event, error) {
	if !isJSONObject(payload) {
		return Event{}, malformed("payload is not a JSON object")
	}
	var env events.CloudWatchEvent
	if err := json.Unmarshal(payload, &env); err != nil {
		return Event{}, malformed("decoding envelope: %w", err)
	}
	if env.Source == "" && env.DetailType == "" {
		return parseRawTestNotification(payload)
	}
	if env.Source == "" || env.DetailType == "" {
		return Event{}, malformed("envelope has no source or no detail-type")
	}

	ev := Event{
		Kind:       KindUnknown,
		ID:         env.ID,
		Source:     env.Source,
		DetailType: env.DetailType,
		Time:       env.Time,
		Region:     env.Region,
		Account:    env.AccountID,
	}
	p, ok := registry[detailKey{source: env.Source, detailType: env.DetailType}]
	if !ok {
		return ev, nil
	}
	if env.ID == "" {
		return Event{}, malformed("%s: envelope has no id", env.DetailType)
	}
	if env.Time.IsZero() {
		return Event{}, malformed("%s %s: envelope has no time", env.DetailType, env.ID)
	}
	if !isJSONObject(env.Detail) {
		return Event{}, malformed("%s %s: detail is missing or not a JSON object", env.DetailType, env.ID)
	}
	ev, err := p(ev, env.Detail)
	if err != nil {
		return Event{}, malformed("%s %s: %w", env.DetailType, env.ID, err)
	}
	return ev, nil
}

// malformed returns an error wrapping ErrMalformed; format may use %w too.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// isJSONObject reports whether b, trimmed of JSON white space, starts like an
// object. Decoding checks the rest.
func isJSONObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// decodeDetail decodes a detail already known to be a JSON object.
func decodeDetail(detail json.RawMessage, v any) error {
	if err := json.Unmarshal(detail, v); err != nil {
		return fmt.Errorf("decoding detail: %w", err)
	}
	return nil
}

// quote quotes a value from the payload for an error message, cut to a
// length a log line can carry.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}

// problemList collects every problem of one detail, so that a single error
// names them all.
type problemList []error

func (p *problemList) add(err error) { *p = append(*p, err) }

// err returns nil when there is no problem.
func (p problemList) err() error {
	if len(p) == 0 {
		return nil
	}
	return p
}

func (p problemList) Error() string {
	msgs := make([]string, len(p))
	for i, err := range p {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (p problemList) Unwrap() []error { return p }
