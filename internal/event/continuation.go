package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// continuationKey is the only top-level key of a continuation payload.
const continuationKey = "nodeDrainerContinuation"

// Continuation is what node-drainer sends itself, asynchronously, to go on
// with a drain that outlives one invocation. Serialized as
//
//	{"nodeDrainerContinuation": {"event": {...}, "startedAt": "...", "attempt": 1}}
type Continuation struct {
	// Event is the original EventBridge event, as received.
	Event json.RawMessage `json:"event"`
	// StartedAt is when the drain began, in the first invocation: the
	// overall drain timeout counts from it.
	StartedAt time.Time `json:"startedAt"`
	// Attempt numbers the continuations of one drain: 1 for the first.
	Attempt int `json:"attempt"`
}

type continuationPayload struct {
	Continuation Continuation `json:"nodeDrainerContinuation"`
}

// NewContinuation returns the payload of continuation number attempt (>= 1)
// of the drain of raw, an actionable EventBridge event, started at
// startedAt. ParseInvocation reads it back.
func NewContinuation(raw []byte, startedAt time.Time, attempt int) ([]byte, error) {
	c := Continuation{Event: raw, StartedAt: startedAt.UTC(), Attempt: attempt}
	if _, err := c.parse(); err != nil {
		return nil, fmt.Errorf("building continuation: %w", err)
	}
	b, err := json.Marshal(continuationPayload{Continuation: c})
	if err != nil {
		return nil, fmt.Errorf("building continuation: %w", err)
	}
	return b, nil
}

// ParseInvocation decodes the payload of one invocation of node-drainer:
// either an EventBridge event, parsed as Parse does (the Continuation is
// nil), or a continuation wrapper, whose inner event must parse to an
// actionable kind. On error the Event is the zero value and the
// Continuation nil.
func ParseInvocation(payload []byte) (Event, *Continuation, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(payload, &top); err != nil || top == nil {
		ev, err := Parse(payload) // reports what is wrong with it
		return ev, nil, err
	}
	inner, ok := top[continuationKey]
	if !ok {
		ev, err := Parse(payload)
		return ev, nil, err
	}
	if len(top) != 1 {
		return Event{}, nil, malformed("continuation: %s must be the only top-level key", continuationKey)
	}
	if !isJSONObject(inner) {
		return Event{}, nil, malformed("continuation: %s is not a JSON object", continuationKey)
	}
	var c Continuation
	if err := json.Unmarshal(inner, &c); err != nil {
		return Event{}, nil, malformed("continuation: decoding: %w", err)
	}
	ev, err := c.parse()
	if err != nil {
		return Event{}, nil, err
	}
	return ev, &c, nil
}

// parse validates c and parses its event.
func (c Continuation) parse() (Event, error) {
	var problems problemList
	if c.Attempt < 1 {
		problems.add(fmt.Errorf("attempt %d is not >= 1", c.Attempt))
	}
	if c.StartedAt.IsZero() {
		problems.add(errors.New("startedAt is missing"))
	}
	if len(c.Event) == 0 {
		problems.add(errors.New("event is missing"))
	}
	if err := problems.err(); err != nil {
		return Event{}, malformed("continuation: %w", err)
	}
	ev, err := Parse(c.Event)
	if err != nil {
		return Event{}, fmt.Errorf("continuation: %w", err)
	}
	if !ev.Kind.Actionable() {
		return Event{}, malformed("continuation: event of kind %s is not one to continue", ev.Kind)
	}
	return ev, nil
}
