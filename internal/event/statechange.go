package event

import (
	"encoding/json"
	"errors"
	"fmt"
)

// InstanceState is an EC2 instance state as a state-change event reports it.
type InstanceState string

// The EC2 instance states. A state-change Event always carries one of them.
const (
	StatePending      InstanceState = "pending"
	StateRunning      InstanceState = "running"
	StateStopping     InstanceState = "stopping"
	StateStopped      InstanceState = "stopped"
	StateShuttingDown InstanceState = "shutting-down"
	StateTerminated   InstanceState = "terminated"
)

// stateChangeDetail is the detail of the EventBridge schema
// aws.ec2@EC2InstanceStateChangeNotification.
type stateChangeDetail struct {
	InstanceID string `json:"instance-id"`
	State      string `json:"state"`
}

// parseStateChange accepts only the six states, spelled exactly: a missing,
// empty or unknown state is an error, never a guess.
func parseStateChange(ev Event, detail json.RawMessage) (Event, error) {
	var d stateChangeDetail
	if err := decodeDetail(detail, &d); err != nil {
		return Event{}, err
	}
	var problems problemList
	if err := checkInstanceID("instance-id", d.InstanceID); err != nil {
		problems.add(err)
	}
	switch state := InstanceState(d.State); state {
	case StatePending, StateRunning, StateStopping, StateStopped, StateShuttingDown, StateTerminated:
	case "":
		problems.add(errors.New("state is missing"))
	default:
		problems.add(fmt.Errorf("state %s is not an EC2 instance state", quote(d.State)))
	}
	if err := problems.err(); err != nil {
		return Event{}, err
	}
	ev.Kind = KindStateChange
	ev.InstanceIDs = []string{d.InstanceID}
	ev.State = InstanceState(d.State)
	return ev, nil
}
