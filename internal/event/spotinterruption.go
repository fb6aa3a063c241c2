package event

import (
	"encoding/json"
	"errors"
	"fmt"
)

// SpotAction is what EC2 does to an interrupted spot instance.
type SpotAction string

// Spot interruption actions.
const (
	SpotActionTerminate SpotAction = "terminate"
	SpotActionStop      SpotAction = "stop"
	SpotActionHibernate SpotAction = "hibernate"
)

// SpotInterruption is the two-minute warning before EC2 reclaims a spot
// instance; Event.Time is when the warning was emitted.
type SpotInterruption struct {
	Action SpotAction
}

// spotInterruptionDetail is the detail of the EventBridge schema
// aws.ec2@EC2SpotInstanceInterruptionWarning.
type spotInterruptionDetail struct {
	InstanceID     string `json:"instance-id"`
	InstanceAction string `json:"instance-action"`
}

func parseSpotInterruption(ev Event, detail json.RawMessage) (Event, error) {
	var d spotInterruptionDetail
	if err := decodeDetail(detail, &d); err != nil {
		return Event{}, err
	}
	var problems problemList
	checkWarned(d.InstanceID, d.InstanceAction, &problems)
	if err := problems.err(); err != nil {
		return Event{}, err
	}
	ev.Kind = KindSpotInterruption
	ev.InstanceIDs = []string{d.InstanceID}
	ev.Spot = &SpotInterruption{Action: SpotAction(d.InstanceAction)}
	return ev, nil
}

// checkWarned checks the instance and action of an interruption warning
// (spot, interruptible Capacity Reservation): the same fields, the same
// values.
func checkWarned(id, action string, problems *problemList) {
	if err := checkInstanceID("instance-id", id); err != nil {
		problems.add(err)
	}
	switch SpotAction(action) {
	case SpotActionTerminate, SpotActionStop, SpotActionHibernate:
	case "":
		problems.add(errors.New("instance-action is missing"))
	default:
		problems.add(fmt.Errorf("instance-action %s is not terminate, stop or hibernate", quote(action)))
	}
}
