package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// HealthStatus is the status of an AWS Health event (detail.statusCode; the
// Health API's EventStatusCode): the same change is announced again as its
// status moves from upcoming to open to closed.
type HealthStatus string

// The statuses of an AWS Health event.
const (
	// HealthUpcoming: the change is scheduled and has not started.
	HealthUpcoming HealthStatus = "upcoming"
	// HealthOpen: the change is under way (or due).
	HealthOpen HealthStatus = "open"
	// HealthClosed: the change is over, or was cancelled: nothing is to be
	// done for it any more, and what was done ahead of it may be undone.
	HealthClosed HealthStatus = "closed"
)

// ScheduledChange is AWS Health's notice of scheduled maintenance or
// retirement of EC2 instances (the affected instances are in
// Event.InstanceIDs).
type ScheduledChange struct {
	// EventARN identifies the Health event; repeated notices about the same
	// change share it.
	EventARN string
	// Status is where the change stands; always one of the HealthStatus
	// constants.
	Status HealthStatus
	// EventTypeCode names the change, such as
	// AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED.
	EventTypeCode string
	// StartTime is when the change begins.
	StartTime time.Time
	// EndTime is when it ends; zero when Health did not announce one.
	EndTime time.Time
}

const (
	healthServiceEC2        = "EC2"
	healthCategoryScheduled = "scheduledChange"
	instanceEntityPrefix    = "i-"
)

// healthDetail is the detail of the EventBridge schema aws.health@AWSHealthEvent,
// restricted to the fields node-drainer reads (AWS Health user guide,
// "Reference: AWS Health events Amazon EventBridge schema"; statusCode is one
// of open, closed, upcoming, as the Health API's EventStatusCode).
type healthDetail struct {
	EventARN          string `json:"eventArn"`
	Service           string `json:"service"`
	StatusCode        string `json:"statusCode"`
	EventTypeCode     string `json:"eventTypeCode"`
	EventTypeCategory string `json:"eventTypeCategory"`
	StartTime         string `json:"startTime"`
	EndTime           string `json:"endTime"`
	AffectedEntities  []struct {
		EntityValue string `json:"entityValue"`
	} `json:"affectedEntities"`
}

// parseScheduledChange keeps EC2 scheduledChange events; Health events of
// other services or categories are KindUnknown. Affected entities that are
// not instances (dedicated hosts "h-...", for example) are skipped, and an
// event about no instance at all is KindUnknown; an entity that starts like
// an instance id but is not one is an error.
func parseScheduledChange(ev Event, detail json.RawMessage) (Event, error) {
	var d healthDetail
	if err := decodeDetail(detail, &d); err != nil {
		return Event{}, err
	}
	if d.Service != healthServiceEC2 || d.EventTypeCategory != healthCategoryScheduled {
		return ev, nil
	}

	var problems problemList
	if strings.TrimSpace(d.EventTypeCode) == "" {
		problems.add(errors.New("eventTypeCode is missing"))
	}
	status := HealthStatus(d.StatusCode)
	switch status {
	case HealthUpcoming, HealthOpen, HealthClosed:
	case "":
		problems.add(errors.New("statusCode is missing"))
	default:
		// a status we do not know could mean "over": refuse rather than drain
		problems.add(fmt.Errorf("statusCode %s is not upcoming, open or closed", quote(d.StatusCode)))
	}
	start, err := parseHealthTime(d.StartTime)
	switch {
	case d.StartTime == "":
		problems.add(errors.New("startTime is missing"))
	case err != nil:
		problems.add(fmt.Errorf("startTime: %w", err))
	}
	var end time.Time
	if d.EndTime != "" {
		if end, err = parseHealthTime(d.EndTime); err != nil {
			problems.add(fmt.Errorf("endTime: %w", err))
		}
	}
	ids := d.instances(&problems)
	if err := problems.err(); err != nil {
		return Event{}, err
	}
	if len(ids) == 0 {
		return ev, nil
	}

	ev.Kind = KindScheduledChange
	ev.InstanceIDs = ids
	ev.Scheduled = &ScheduledChange{
		EventARN:      d.EventARN,
		Status:        status,
		EventTypeCode: d.EventTypeCode,
		StartTime:     start,
		EndTime:       end,
	}
	return ev, nil
}

// instances are the ids of the affected entities that are instances, once
// each in their order; an entity missing its value, or looking like an
// instance id without being one, is a problem.
func (d healthDetail) instances(problems *problemList) []string {
	if len(d.AffectedEntities) == 0 {
		problems.add(errors.New("affectedEntities is missing"))
	}
	var ids []string
	seen := make(map[string]bool)
	for i, entity := range d.AffectedEntities {
		v := entity.EntityValue
		switch {
		case v == "":
			problems.add(fmt.Errorf("affectedEntities[%d].entityValue is missing", i))
		case !strings.HasPrefix(v, instanceEntityPrefix):
			// Not an instance: nothing node-drainer can drain.
		case !validInstanceID(v):
			problems.add(fmt.Errorf("affectedEntities[%d].entityValue %s is not an EC2 instance id", i, quote(v)))
		case !seen[v]:
			seen[v] = true
			ids = append(ids, v)
		}
	}
	return ids
}

// healthTimeLayouts are the forms AWS Health writes times in: RFC 1123 in
// GMT with a day of one or two digits ("Thu, 1 Nov 2018 22:00:00 GMT"), and
// RFC 3339 to be safe. A named zone other than GMT/UTC is refused rather
// than silently read as UTC.
var healthTimeLayouts = []string{
	"Mon, 2 Jan 2006 15:04:05 GMT",
	"Mon, 2 Jan 2006 15:04:05 UTC",
	time.RFC3339,
}

func parseHealthTime(s string) (time.Time, error) {
	for _, layout := range healthTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s is not a time like %q", quote(s), healthTimeLayouts[0])
}
