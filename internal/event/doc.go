// Package event turns the raw payload a Lambda invocation receives into one
// typed, validated Event: the only place where node-drainer reads EventBridge
// JSON.
//
// EventBridge delivers ASG lifecycle-hook, EC2 spot/rebalance/state-change,
// EC2 capacity reservation and AWS Health events in the same envelope
// (aws-lambda-go's events.CloudWatchEvent); Parse looks the envelope's
// (source, detail-type) up in a registry holding one small parser per Kind,
// each decoding and validating the detail of one EventBridge schema.
// Node-drainer also invokes itself to continue a long drain; ParseInvocation
// accepts that Continuation wrapper as well as a plain event.
//
// Three outcomes, and the handler must treat them differently:
//
//   - an actionable Kind (Kind.Actionable): the event concerns the instances
//     in Event.InstanceIDs, at least one, each a well-formed instance id —
//     but a Capacity Block's warning (KindCapacityBlockExpiry), which names
//     its Capacity Reservation and no instance;
//   - KindUnknown or KindTestNotification with a nil error: not ours or a
//     hook's test message, ignore it without side effects;
//   - an error wrapping ErrMalformed: bad input; do nothing (retrying cannot
//     fix it). The Event returned with an error is always the zero value, so
//     a caller that ignores the error cannot act on half-parsed data.
//
// Validation is strict on what node-drainer acts upon: an instance id must be
// "i-" followed by 8 or 17 lowercase hex digits, a state-change must carry one
// of the six EC2 states exactly (an event without a state is an error, never
// a drain), a lifecycle action must carry its token, group and hook names and
// the transition matching its detail-type.
package event
