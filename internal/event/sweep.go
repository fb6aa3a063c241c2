package event

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// The sweep's EventBridge schedule (an Events rule with a schedule
// expression) sends the "Scheduled Event" of source aws.events; its detail
// is an empty object.
const (
	sourceEvents        = "aws.events"
	detailTypeScheduled = "Scheduled Event"
)

// SourceSweep is the source of the lifecycle events the sweep makes for a
// hook whose own event never came: the detail of Auto Scaling's event,
// without a token (the sweep cannot know it; the action is completed by
// instance id). Auto Scaling never sends an event without a token, so only
// events of this source may omit it.
const SourceSweep = "node-drainer.sweep"

func parseSweep(ev Event, _ json.RawMessage) (Event, error) {
	ev.Kind = KindSweep
	return ev, nil
}

// parseSweptTerminate and parseSweptLaunch parse the lifecycle events the
// sweep makes: the token may be missing, everything else is checked as for
// Auto Scaling's own.
func parseSweptTerminate(ev Event, detail json.RawMessage) (Event, error) {
	return parseLifecycle(ev, detail, KindTerminate, TransitionTerminating, false)
}

func parseSweptLaunch(ev Event, detail json.RawMessage) (Event, error) {
	return parseLifecycle(ev, detail, KindLaunch, TransitionLaunching, false)
}

// NewSwept returns the EventBridge event the sweep makes for a lifecycle
// action whose own event never came (no token: the action is completed by
// instance id), as of now.
func NewSwept(kind Kind, a LifecycleAction, region string, now time.Time) ([]byte, error) {
	var detailType string
	switch kind {
	case KindTerminate:
		detailType, a.Transition = detailTypeTerminate, TransitionTerminating
	case KindLaunch:
		detailType, a.Transition = detailTypeLaunch, TransitionLaunching
	default:
		return nil, fmt.Errorf("the sweep makes only lifecycle events, not %s", kind)
	}
	detail, err := json.Marshal(lifecycleDetail{
		AutoScalingGroupName: a.AutoScalingGroupName,
		LifecycleHookName:    a.HookName,
		EC2InstanceID:        a.InstanceID,
		LifecycleTransition:  string(a.Transition),
		Origin:               string(a.Origin),
		Destination:          string(a.Destination),
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(events.CloudWatchEvent{
		Version:    "0",
		ID:         fmt.Sprintf("sweep-%s-%d", a.InstanceID, now.UnixNano()),
		DetailType: detailType,
		Source:     SourceSweep,
		Time:       now.UTC(),
		Region:     region,
		Resources:  []string{},
		Detail:     detail,
	})
}
