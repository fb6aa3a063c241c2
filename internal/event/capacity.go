package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// CapacityInterruption is EC2's warning that it reclaims an instance of an
// interruptible Capacity Reservation, two minutes ahead; Event.Time is when
// the warning was emitted.
type CapacityInterruption struct {
	// Action is what EC2 does to the instance (documented: terminate).
	Action SpotAction
	// TerminationTime is when EC2 takes the instance (detail
	// instance-termination-time, UTC); zero when the warning gave none.
	TerminationTime time.Time
}

// CapacityBlockExpiry is EC2's warning that a Capacity Block ends in 40
// minutes: the instances running in it begin to terminate 10 minutes after
// the warning (Event.Time). It names the reservation, not its instances:
// Event.InstanceIDs is empty, unless a continuation narrowed the event to
// one of them.
type CapacityBlockExpiry struct {
	// ReservationID is the Capacity Block's Capacity Reservation ("cr-").
	ReservationID string
	// EndDate is when the block ends (detail end-date, UTC); zero when the
	// warning gave none.
	EndDate time.Time
}

// capacityInterruptionDetail is the detail of the EC2 Capacity Reservation
// Instance Interruption Warning (EC2 user guide, "Monitor interruptible
// Capacity Reservations"); its azId is not read.
type capacityInterruptionDetail struct {
	InstanceID      string `json:"instance-id"`
	InstanceAction  string `json:"instance-action"`
	TerminationTime string `json:"instance-termination-time"`
}

// capacityBlockDetail is the detail of the Capacity Block Expiration Warning
// (EC2 user guide, "Monitor Capacity Blocks using EventBridge").
type capacityBlockDetail struct {
	ReservationID string `json:"capacity-reservation-id"`
	EndDate       string `json:"end-date"`
}

func parseCapacityInterruption(ev Event, detail json.RawMessage) (Event, error) {
	var d capacityInterruptionDetail
	if err := decodeDetail(detail, &d); err != nil {
		return Event{}, err
	}
	var problems problemList
	checkWarned(d.InstanceID, d.InstanceAction, &problems)
	at := optionalTime("instance-termination-time", d.TerminationTime, &problems)
	if err := problems.err(); err != nil {
		return Event{}, err
	}
	ev.Kind = KindCapacityInterruption
	ev.InstanceIDs = []string{d.InstanceID}
	ev.Capacity = &CapacityInterruption{Action: SpotAction(d.InstanceAction), TerminationTime: at}
	return ev, nil
}

func parseCapacityBlock(ev Event, detail json.RawMessage) (Event, error) {
	var d capacityBlockDetail
	if err := decodeDetail(detail, &d); err != nil {
		return Event{}, err
	}
	var problems problemList
	switch {
	case d.ReservationID == "":
		problems.add(errors.New("capacity-reservation-id is missing"))
	case !validReservationID(d.ReservationID):
		problems.add(fmt.Errorf("capacity-reservation-id %s is not a Capacity Reservation id (cr- and 17 hex digits)", quote(d.ReservationID)))
	}
	end := optionalTime("end-date", d.EndDate, &problems)
	if err := problems.err(); err != nil {
		return Event{}, err
	}
	ev.Kind = KindCapacityBlockExpiry
	ev.CapacityBlock = &CapacityBlockExpiry{ReservationID: d.ReservationID, EndDate: end}
	return ev, nil
}

// optionalTime reads a time the detail may leave out (zero then): RFC 3339,
// or the RFC 1123 forms AWS Health writes. One that is there but does not
// read is a problem: the drain's deadline derives from it.
func optionalTime(field, s string, problems *problemList) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := parseHealthTime(s)
	if err != nil {
		problems.add(fmt.Errorf("%s: %w", field, err))
	}
	return t
}

// validReservationID reports whether id is a Capacity Reservation id: "cr-"
// followed by 17 lowercase hexadecimal digits.
func validReservationID(id string) bool {
	const prefix = "cr-"
	if len(id) != len(prefix)+17 || id[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
