package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// LifecycleTransition is the lifecycle-hook transition an ASG event reports.
type LifecycleTransition string

// Transitions of Auto Scaling lifecycle hooks.
const (
	TransitionLaunching        LifecycleTransition = "autoscaling:EC2_INSTANCE_LAUNCHING"
	TransitionTerminating      LifecycleTransition = "autoscaling:EC2_INSTANCE_TERMINATING"
	TransitionTestNotification LifecycleTransition = "autoscaling:TEST_NOTIFICATION"
)

// LifecycleLocation is where an instance comes from or goes to in a
// lifecycle action (LifecycleAction.Origin and Destination). Auto Scaling
// sets them when the group has a warm pool.
type LifecycleLocation string

// Locations Auto Scaling reports; other values are passed through as they
// come.
const (
	LocationEC2              LifecycleLocation = "EC2"
	LocationAutoScalingGroup LifecycleLocation = "AutoScalingGroup"
	LocationWarmPool         LifecycleLocation = "WarmPool"
)

// LifecycleAction is the lifecycle hook holding an instance, with what
// CompleteLifecycleAction and RecordLifecycleActionHeartbeat need. Token is a
// credential for that hook: LogValue leaves it out.
type LifecycleAction struct {
	AutoScalingGroupName string
	HookName             string
	Token                string
	InstanceID           string
	Transition           LifecycleTransition
	// NotificationMetadata is the free text configured on the hook, if any.
	NotificationMetadata string
	// Origin and Destination are empty unless the group has a warm pool.
	Origin      LifecycleLocation
	Destination LifecycleLocation
}

// lifecycleDetail is the detail of the EventBridge schemas
// aws.autoscaling@EC2InstanceTerminateLifecycleAction and
// aws.autoscaling@EC2InstanceLaunchLifecycleAction (the same fields).
// Event is only present on test notifications.
type lifecycleDetail struct {
	LifecycleActionToken string `json:"LifecycleActionToken"`
	AutoScalingGroupName string `json:"AutoScalingGroupName"`
	LifecycleHookName    string `json:"LifecycleHookName"`
	EC2InstanceID        string `json:"EC2InstanceId"`
	LifecycleTransition  string `json:"LifecycleTransition"`
	NotificationMetadata string `json:"NotificationMetadata"`
	Origin               string `json:"Origin"`
	Destination          string `json:"Destination"`
	Event                string `json:"Event"`
}

func parseTerminate(ev Event, detail json.RawMessage) (Event, error) {
	return parseLifecycle(ev, detail, KindTerminate, TransitionTerminating, true)
}

func parseLaunch(ev Event, detail json.RawMessage) (Event, error) {
	return parseLifecycle(ev, detail, KindLaunch, TransitionLaunching, true)
}

// parseLifecycle parses a lifecycle action whose detail-type expects the
// transition want, or a test notification sent under either detail-type.
func parseLifecycle(ev Event, detail json.RawMessage, kind Kind, want LifecycleTransition, needToken bool) (Event, error) {
	var d lifecycleDetail
	if err := decodeDetail(detail, &d); err != nil {
		return Event{}, err
	}
	if d.Event == string(TransitionTestNotification) || d.LifecycleTransition == string(TransitionTestNotification) {
		ev.Kind = KindTestNotification
		return ev, nil
	}

	var problems problemList
	for _, f := range []struct {
		name, value string
		required    bool
	}{
		{"LifecycleActionToken", d.LifecycleActionToken, needToken},
		{"AutoScalingGroupName", d.AutoScalingGroupName, true},
		{"LifecycleHookName", d.LifecycleHookName, true},
	} {
		if f.required && strings.TrimSpace(f.value) == "" {
			problems.add(fmt.Errorf("%s is missing", f.name))
		}
	}
	if err := checkInstanceID("EC2InstanceId", d.EC2InstanceID); err != nil {
		problems.add(err)
	}
	switch got := LifecycleTransition(d.LifecycleTransition); {
	case got == "":
		problems.add(errors.New("LifecycleTransition is missing"))
	case got != want:
		problems.add(fmt.Errorf("LifecycleTransition %s does not match the detail-type (want %s)", quote(string(got)), want))
	}
	if err := problems.err(); err != nil {
		return Event{}, err
	}

	ev.Kind = kind
	ev.InstanceIDs = []string{d.EC2InstanceID}
	ev.Lifecycle = &LifecycleAction{
		AutoScalingGroupName: d.AutoScalingGroupName,
		HookName:             d.LifecycleHookName,
		Token:                d.LifecycleActionToken,
		InstanceID:           d.EC2InstanceID,
		Transition:           want,
		NotificationMetadata: d.NotificationMetadata,
		Origin:               LifecycleLocation(d.Origin),
		Destination:          LifecycleLocation(d.Destination),
	}
	return ev, nil
}
