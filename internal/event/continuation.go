package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// continuationKey is the only top-level key of a continuation payload.
const continuationKey = "nodeDrainerContinuation"

// Continuation is what node-drainer sends itself, asynchronously, to go on
// with a drain that outlives one invocation, or to handle one instance of an
// event that lists several. Serialized as
//
//	{"nodeDrainerContinuation": {"event": {...}, "startedAt": "...", "attempt": 2}}
type Continuation struct {
	// Event is the original EventBridge event, as received.
	Event json.RawMessage `json:"event"`
	// StartedAt is when the drain began, in the first invocation: the
	// overall drain timeout counts from it.
	StartedAt time.Time `json:"startedAt"`
	// Attempt numbers the invocations of one drain: 1 is the first (the
	// original event, or the first invocation for one instance), 2 the
	// first continuation, and so on.
	Attempt int `json:"attempt"`
	// Instance, when set, narrows the event to this one of its instances:
	// an AWS Health scheduled change listing several instances is handled
	// one invocation per instance, and so is a Capacity Block's warning,
	// whose instances the handler looked up (any instance id then: the
	// handler checks it is in the reservation). The parsed Event then
	// lists only it.
	Instance string `json:"instance,omitempty"`
	// Holder names the invocation that handed this drain over: it holds
	// the instance's lease if it could not give it up (the apiserver down
	// across the hand-over), and the continuation may take it from it
	// rather than wait for it to go stale (rule 16).
	Holder string `json:"holder,omitempty"`
	// Holders are every invocation the continuation may take the lease
	// from, Holder last. One that handed over without knowingly getting the
	// lease (the apiserver failing its claim) names those before it that
	// may still hold it, and itself: its claim may have taken it with the
	// answer lost. Empty: Holder alone (a payload of an earlier version).
	Holders []string `json:"holders,omitempty"`
	// StartUntold: the drain has made no eviction yet, so its Node Drain
	// Started is still to be told, by the first invocation that evicts.
	// False (a payload of an earlier version too): told, or not ours.
	StartUntold bool `json:"startUntold,omitempty"`
	// DrainTimeout is the timeout the drain began with (its group's
	// node-drainer.io/drain-timeout, or DRAIN_TIMEOUT): a continuation that
	// cannot read its group keeps it. Zero (a payload of an earlier
	// version too): DRAIN_TIMEOUT then.
	DrainTimeout time.Duration `json:"drainTimeout,omitempty"`
}

// MayTakeFrom is every invocation the continuation may take the lease from.
func (c Continuation) MayTakeFrom() []string {
	if len(c.Holders) > 0 {
		return c.Holders
	}
	if c.Holder != "" {
		return []string{c.Holder}
	}
	return nil
}

// Bounds on the start time of a continuation (see Continuation.Check).
const (
	// ContinuationClockSkew is how far in the future a startedAt may be:
	// the clocks of two invocations of one function differ little.
	ContinuationClockSkew = 2 * time.Minute
	// ContinuationSlack is how much older than the drain timeout a startedAt
	// may be: the last continuation is sent just before the timeout and may
	// be delivered late (one Lambda run).
	ContinuationSlack = 15 * time.Minute
)

// ErrContinuationRefused classifies the errors of Continuation.Check: the
// continuation is well formed but not one to act on (too many attempts, a
// start time in the future or too old). Nothing is done with it.
var ErrContinuationRefused = errors.New("continuation refused")

// Check refuses a continuation that goes past maxContinuations (continuations
// of one drain, not counting its first invocation), or whose drain started
// in the future (beyond ContinuationClockSkew) or longer ago than
// drainTimeout plus ContinuationSlack. The error wraps
// ErrContinuationRefused and names the bound.
func (c Continuation) Check(now time.Time, maxContinuations int, drainTimeout time.Duration) error {
	var problems problemList
	if n := c.Attempt - 1; n > maxContinuations {
		problems.add(fmt.Errorf("attempt %d is continuation %d, past the limit of %d (MAX_CONTINUATIONS)", c.Attempt, n, maxContinuations))
	}
	if len(c.Holders) > c.Attempt-1 {
		problems.add(fmt.Errorf("%d lease holders named by attempt %d: at most one an attempt before it", len(c.Holders), c.Attempt))
	}
	if ahead := c.StartedAt.Sub(now); ahead > ContinuationClockSkew {
		problems.add(fmt.Errorf("startedAt %s is %s in the future", c.StartedAt.UTC().Format(time.RFC3339), ahead.Round(time.Second)))
	}
	if age, limit := now.Sub(c.StartedAt), drainTimeout+ContinuationSlack; age > limit {
		problems.add(fmt.Errorf("startedAt %s is %s old, older than the drain timeout %s plus %s",
			c.StartedAt.UTC().Format(time.RFC3339), age.Round(time.Second), drainTimeout, ContinuationSlack))
	}
	if err := problems.err(); err != nil {
		return fmt.Errorf("%w: %w", ErrContinuationRefused, err)
	}
	return nil
}

type continuationPayload struct {
	Continuation Continuation `json:"nodeDrainerContinuation"`
}

// NewContinuation returns the payload of continuation number attempt (>= 1)
// of the drain of raw, an actionable EventBridge event, started at
// startedAt. ParseInvocation reads it back.
func NewContinuation(raw []byte, startedAt time.Time, attempt int) ([]byte, error) {
	return Continuation{Event: raw, StartedAt: startedAt, Attempt: attempt}.Payload()
}

// NewContinuationFor is NewContinuation narrowed to one instance of the
// event (instanceID must be one of its instances; "" is all of them).
func NewContinuationFor(raw []byte, startedAt time.Time, attempt int, instanceID string) ([]byte, error) {
	return Continuation{Event: raw, StartedAt: startedAt, Attempt: attempt, Instance: instanceID}.Payload()
}

// Payload is the invocation payload that carries c (its start time in UTC);
// its event must parse to an actionable kind.
func (c Continuation) Payload() ([]byte, error) {
	c.StartedAt = c.StartedAt.UTC()
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
	if inner, ok := top[shardKey]; ok {
		if len(top) != 1 {
			return Event{}, nil, malformed("sweep shard: %s must be the only top-level key", shardKey)
		}
		ev, err := parseShard(inner)
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
	if c.Instance != "" {
		switch {
		case ev.Kind == KindCapacityBlockExpiry:
			// the block's warning names no instance: the handler found this
			// one by the reservation, and reads again that it is in it
			if !validInstanceID(c.Instance) {
				return Event{}, malformed("continuation: instance %s is not an EC2 instance id", quote(c.Instance))
			}
		case !slices.Contains(ev.InstanceIDs, c.Instance):
			return Event{}, malformed("continuation: instance %s is not one of the event's %v", quote(c.Instance), ev.InstanceIDs)
		}
		ev.InstanceIDs = []string{c.Instance}
	}
	return ev, nil
}
