package event

import "log/slog"

// LogValue describes the event for log/slog with the project's stable keys
// (instance, asg, hook). It never includes the lifecycle action token.
func (e Event) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("kind", string(e.Kind)),
		slog.String("id", e.ID),
	}
	if !e.Kind.Actionable() {
		attrs = append(attrs, slog.String("source", e.Source), slog.String("detailType", e.DetailType))
	}
	switch len(e.InstanceIDs) {
	case 0:
	case 1:
		attrs = append(attrs, slog.String("instance", e.InstanceIDs[0]))
	default:
		attrs = append(attrs, slog.Any("instances", e.InstanceIDs))
	}
	if e.Lifecycle != nil {
		attrs = append(attrs, slog.Any("lifecycle", *e.Lifecycle))
	}
	if e.Spot != nil {
		attrs = append(attrs, slog.String("spotAction", string(e.Spot.Action)))
	}
	if e.Capacity != nil {
		attrs = append(attrs, slog.String("instanceAction", string(e.Capacity.Action)))
		if !e.Capacity.TerminationTime.IsZero() {
			attrs = append(attrs, slog.Time("terminationTime", e.Capacity.TerminationTime))
		}
	}
	if e.CapacityBlock != nil {
		attrs = append(attrs, slog.String("capacityReservation", e.CapacityBlock.ReservationID))
		if !e.CapacityBlock.EndDate.IsZero() {
			attrs = append(attrs, slog.Time("endDate", e.CapacityBlock.EndDate))
		}
	}
	if e.State != "" {
		attrs = append(attrs, slog.String("state", string(e.State)))
	}
	if e.Scheduled != nil {
		attrs = append(attrs,
			slog.String("eventTypeCode", e.Scheduled.EventTypeCode),
			slog.Time("startTime", e.Scheduled.StartTime))
	}
	return slog.GroupValue(attrs...)
}

// LogValue describes the lifecycle action for log/slog without its token.
func (l LifecycleAction) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("asg", l.AutoScalingGroupName),
		slog.String("hook", l.HookName),
		slog.String("transition", string(l.Transition)),
	}
	if l.Origin != "" || l.Destination != "" {
		attrs = append(attrs, slog.String("origin", string(l.Origin)), slog.String("destination", string(l.Destination)))
	}
	return slog.GroupValue(attrs...)
}
