package event

import "encoding/json"

// rebalanceDetail is the detail of the EventBridge schema
// aws.ec2@EC2InstanceRebalanceRecommendation.
type rebalanceDetail struct {
	InstanceID string `json:"instance-id"`
}

func parseRebalance(ev Event, detail json.RawMessage) (Event, error) {
	var d rebalanceDetail
	if err := decodeDetail(detail, &d); err != nil {
		return Event{}, err
	}
	if err := checkInstanceID("instance-id", d.InstanceID); err != nil {
		return Event{}, err
	}
	ev.Kind = KindRebalance
	ev.InstanceIDs = []string{d.InstanceID}
	return ev, nil
}
