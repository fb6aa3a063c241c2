package event

import (
	"encoding/json"
	"time"
)

// rawTestNotification is the message Auto Scaling sends to a lifecycle
// hook's notification target when the hook is created, outside any
// EventBridge envelope:
//
//	{"AccountId": "...", "RequestId": "...", "AutoScalingGroupARN": "...",
//	 "AutoScalingGroupName": "...", "Service": "AWS Auto Scaling",
//	 "Event": "autoscaling:TEST_NOTIFICATION", "Time": "..."}
//
// Inside an envelope the same "Event" key marks a test notification; see
// parseLifecycle.
type rawTestNotification struct {
	AccountID string `json:"AccountId"`
	RequestID string `json:"RequestId"`
	Event     string `json:"Event"`
	Time      string `json:"Time"`
}

// parseRawTestNotification handles a payload without source and
// detail-type: only the hook's test message is accepted.
func parseRawTestNotification(payload []byte) (Event, error) {
	var n rawTestNotification
	if err := json.Unmarshal(payload, &n); err != nil {
		return Event{}, malformed("decoding payload: %w", err)
	}
	if n.Event != string(TransitionTestNotification) {
		return Event{}, malformed("not an EventBridge event: source and detail-type are missing")
	}
	ev := Event{
		Kind:    KindTestNotification,
		ID:      n.RequestID,
		Source:  sourceAutoScaling,
		Account: n.AccountID,
	}
	// The time only serves logging: a test notification is never acted
	// upon, so an unreadable one is not worth an error.
	if t, err := time.Parse(time.RFC3339, n.Time); err == nil {
		ev.Time = t
	}
	return ev, nil
}
