package event

import "encoding/json"

// EventBridge sources and detail-types node-drainer handles (the "Events" table
// of docs/architecture.md says what happens on each).
const (
	sourceAutoScaling = "aws.autoscaling"
	sourceEC2         = "aws.ec2"
	sourceHealth      = "aws.health"

	detailTypeTerminate        = "EC2 Instance-terminate Lifecycle Action"
	detailTypeLaunch           = "EC2 Instance-launch Lifecycle Action"
	detailTypeSpotInterruption = "EC2 Spot Instance Interruption Warning"
	detailTypeRebalance        = "EC2 Instance Rebalance Recommendation"
	detailTypeStateChange      = "EC2 Instance State-change Notification"
	detailTypeHealth           = "AWS Health Event"

	// An interruptible Capacity Reservation's two-minute warning; one page
	// of the EC2 user guide spells it with "Interruptible" too.
	detailTypeCapacityInterruption      = "EC2 Capacity Reservation Instance Interruption Warning"
	detailTypeCapacityInterruptionOther = "EC2 Interruptible Capacity Reservation Instance Interruption Warning"
	// A Capacity Block's end, 40 minutes ahead: the EC2 user guide spells it
	// both ways.
	detailTypeCapacityBlock      = "Capacity Block Expiration Warning"
	detailTypeCapacityBlockOther = "Capacity Block Reservation Expiration Warning"
)

// detailKey selects the parser of an event.
type detailKey struct {
	source     string
	detailType string
}

// detailParser decodes and validates the detail of one EventBridge schema.
// It receives the Event filled from the envelope (Kind KindUnknown) and
// returns it completed. Its errors describe what is wrong; Parse wraps them
// with ErrMalformed.
type detailParser func(ev Event, detail json.RawMessage) (Event, error)

// registry holds one parser per (source, detail-type); anything else is
// KindUnknown.
var registry = map[detailKey]detailParser{
	{sourceAutoScaling, detailTypeTerminate}:         parseTerminate,
	{sourceAutoScaling, detailTypeLaunch}:            parseLaunch,
	{sourceEC2, detailTypeSpotInterruption}:          parseSpotInterruption,
	{sourceEC2, detailTypeCapacityInterruption}:      parseCapacityInterruption,
	{sourceEC2, detailTypeCapacityInterruptionOther}: parseCapacityInterruption,
	{sourceEC2, detailTypeCapacityBlock}:             parseCapacityBlock,
	{sourceEC2, detailTypeCapacityBlockOther}:        parseCapacityBlock,
	{sourceEC2, detailTypeRebalance}:                 parseRebalance,
	{sourceEC2, detailTypeStateChange}:               parseStateChange,
	{sourceHealth, detailTypeHealth}:                 parseScheduledChange,
	{sourceEvents, detailTypeScheduled}:              parseSweep,
	{SourceSweep, detailTypeTerminate}:               parseSweptTerminate,
	{SourceSweep, detailTypeLaunch}:                  parseSweptLaunch,
}
