package event

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

const (
	eventsDir   = "../../events"
	testdataDir = "testdata"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// jsonFiles lists the *.json files of dir, by name.
func jsonFiles(t testing.TB, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no sample event in %s", dir)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	return names
}

// checkCovered fails when a file of dir has no test case, or a test case
// no file: adding a sample means saying what it parses to.
func checkCovered[V any](t *testing.T, dir string, cases map[string]V) {
	t.Helper()
	files := jsonFiles(t, dir)
	onDisk := make(map[string]bool)
	for _, f := range files {
		onDisk[f] = true
		if _, ok := cases[f]; !ok {
			t.Errorf("%s/%s has no test case", dir, f)
		}
	}
	var missing []string
	for name := range cases {
		if !onDisk[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("test case %s has no file in %s", name, dir)
	}
}

const (
	asgName  = "eks-general-2ec9a6f1-7b3d-4e20-9c51-0d8e6a4f1b37"
	termTok  = "c613620e-07e2-4ed2-a9e2-ef8258911ade"
	launchTk = "71514b9d-6a40-4b26-8523-05e7e4f1c2a9"
)

// TestParseSampleEvents round-trips every file of the top-level events/
// directory (the sam local invoke samples) to the typed event it must give.
func TestParseSampleEvents(t *testing.T) {
	base := func(id, source, detailType, tm string) Event {
		return Event{ID: id, Source: source, DetailType: detailType, Time: mustTime(t, tm), Region: "us-east-1", Account: "123456789012"}
	}
	with := func(ev Event, f func(*Event)) Event { f(&ev); return ev }

	terminate := with(base("8f3c2b1e-6d4a-4c7e-9b2f-1a5e7d9c3b60", "aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", "2026-11-18T14:02:37Z"), func(e *Event) {
		e.Kind = KindTerminate
		e.InstanceIDs = []string{"i-0b1f6e8d2c4a9f371"}
		e.Lifecycle = &LifecycleAction{
			AutoScalingGroupName: asgName,
			HookName:             "node-drainer-terminate",
			Token:                termTok,
			InstanceID:           "i-0b1f6e8d2c4a9f371",
			Transition:           TransitionTerminating,
			NotificationMetadata: `{"cluster":"prod"}`,
			Origin:               LocationAutoScalingGroup,
			Destination:          LocationEC2,
		}
	})
	stateChange := func(id, tm, instance string, state InstanceState) Event {
		return with(base(id, "aws.ec2", "EC2 Instance State-change Notification", tm), func(e *Event) {
			e.Kind = KindStateChange
			e.InstanceIDs = []string{instance}
			e.State = state
		})
	}

	cases := map[string]struct {
		want         Event
		continuation *Continuation // compared without its raw Event
	}{
		"asg-terminate.json": {want: terminate},
		"asg-launch.json": {want: with(base("2a7d9e4c-1b3f-4e8a-a6c2-7f0d5b9e1c84", "aws.autoscaling", "EC2 Instance-launch Lifecycle Action", "2026-11-18T14:03:05Z"), func(e *Event) {
			e.Kind = KindLaunch
			e.InstanceIDs = []string{"i-07d3a2c9e5b18f604"}
			e.Lifecycle = &LifecycleAction{
				AutoScalingGroupName: asgName,
				HookName:             "node-drainer-launch",
				Token:                launchTk,
				InstanceID:           "i-07d3a2c9e5b18f604",
				Transition:           TransitionLaunching,
				Origin:               LocationEC2,
				Destination:          LocationAutoScalingGroup,
			}
		})},
		"asg-test-notification.json": {want: with(base("b6e1f3a8-9c2d-4f57-8e0a-3d4c1b7a9f26", "aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", "2026-11-02T09:15:44Z"), func(e *Event) {
			e.Kind = KindTestNotification
		})},
		"spot-interruption.json": {want: with(base("c4a1e7d2-5b9f-4e36-8a0c-2f7b1d6e9a53", "aws.ec2", "EC2 Spot Instance Interruption Warning", "2026-11-18T16:41:09Z"), func(e *Event) {
			e.Kind = KindSpotInterruption
			e.InstanceIDs = []string{"i-0c95a1e47d3b2f860"}
			e.Spot = &SpotInterruption{Action: SpotActionTerminate}
		})},
		"capacity-reservation-interruption.json": {want: with(base("3b8e1f6a-2c9d-4e75-a0b4-7d1c5f9e2a68", "aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning", "2026-11-20T10:15:00Z"), func(e *Event) {
			e.Kind = KindCapacityInterruption
			e.InstanceIDs = []string{"i-0a7e3c5f9b1d2e468"}
			e.Capacity = &CapacityInterruption{Action: SpotActionTerminate, TerminationTime: time.Date(2026, 11, 20, 10, 17, 0, 0, time.UTC)}
		})},
		"capacity-block-expiration.json": {want: with(base("c7d2a9e4-6f1b-4c38-9e5a-0b3f8d1c7e29", "aws.ec2", "Capacity Block Expiration Warning", "2026-11-21T11:20:00Z"), func(e *Event) {
			e.Kind = KindCapacityBlockExpiry
			e.CapacityBlock = &CapacityBlockExpiry{ReservationID: "cr-0d4b8f2a6c1e9e357", EndDate: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
		})},
		"rebalance-recommendation.json": {want: with(base("9d2e5f1a-7c4b-4a08-b3e6-1f8c0a7d2e95", "aws.ec2", "EC2 Instance Rebalance Recommendation", "2026-11-18T16:37:52Z"), func(e *Event) {
			e.Kind = KindRebalance
			e.InstanceIDs = []string{"i-0c95a1e47d3b2f860"}
		})},
		"state-change-stopping.json":      {want: stateChange("e1b7c4d9-2a6f-4c83-9e05-7b3a1d8f6c20", "2026-11-19T08:30:12Z", "i-0e4d7b1a96c23f58d", StateStopping)},
		"state-change-stopped.json":       {want: stateChange("3f8a2d6c-9e1b-4d75-a0c3-5b7e9f1a4d68", "2026-11-19T08:31:04Z", "i-0e4d7b1a96c23f58d", StateStopped)},
		"state-change-running.json":       {want: stateChange("7c0e4a9b-3d5f-4b12-8f6a-e2d1c9b7a035", "2026-11-19T09:12:47Z", "i-0e4d7b1a96c23f58d", StateRunning)},
		"state-change-shutting-down.json": {want: stateChange("4b9f1e7a-6c2d-4e80-b5a3-d8c0f2e6a179", "2026-11-18T14:09:31Z", "i-0b1f6e8d2c4a9f371", StateShuttingDown)},
		"state-change-terminated.json":    {want: stateChange("d5a3c8e1-0f7b-4926-9c4e-a1b6f3d8e702", "2026-11-18T14:10:26Z", "i-0b1f6e8d2c4a9f371", StateTerminated)},
		"scheduled-change.json": {want: with(base("6e2b8d4f-1a9c-4f73-b0e5-c3a7d1f9e248", "aws.health", "AWS Health Event", "2026-11-17T21:04:36Z"), func(e *Event) {
			e.Kind = KindScheduledChange
			e.InstanceIDs = []string{"i-0f2a8c6e1d7b3e945", "i-4f8c2a1e"}
			e.Scheduled = &ScheduledChange{
				EventARN:      "arn:aws:health:us-east-1::event/EC2/AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED_3b7e1c9a-5d2f-4a86-9e0b-f4c8a2d6b153",
				Status:        HealthUpcoming,
				EventTypeCode: "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
				StartTime:     time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
				EndTime:       time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
			}
		})},
		"scheduled-change-closed.json": {want: with(base("9a4c1e7b-2f6d-4b38-a0e9-5d7c3b1f8e26", "aws.health", "AWS Health Event", "2026-11-19T08:30:12Z"), func(e *Event) {
			e.Kind = KindScheduledChange
			e.InstanceIDs = []string{"i-0f2a8c6e1d7b3e945", "i-4f8c2a1e"}
			e.Scheduled = &ScheduledChange{
				EventARN:      "arn:aws:health:us-east-1::event/EC2/AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED_3b7e1c9a-5d2f-4a86-9e0b-f4c8a2d6b153",
				Status:        HealthClosed,
				EventTypeCode: "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
				StartTime:     time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
				EndTime:       time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
			}
		})},
		"sweep.json": {want: with(base("5c1e7a93-2d4b-4f08-9e6a-b3d8f1c27a40", "aws.events", "Scheduled Event", "2026-11-18T14:05:00Z"), func(e *Event) {
			e.Kind = KindSweep
		})},
		"continuation-asg-terminate.json": {
			want:         terminate,
			continuation: &Continuation{StartedAt: mustTime(t, "2026-11-18T14:02:38.412Z"), Attempt: 1},
		},
	}
	checkCovered(t, eventsDir, cases)

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			payload, err := os.ReadFile(filepath.Join(eventsDir, name))
			if err != nil {
				t.Skip(err) // reported by checkCovered
			}
			got, cont, err := ParseInvocation(payload)
			if err != nil {
				t.Fatalf("ParseInvocation: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("event:\n got %s\nwant %s", describe(got), describe(tc.want))
			}
			switch {
			case tc.continuation == nil && cont != nil:
				t.Errorf("continuation = %+v, want none", cont)
			case tc.continuation != nil && cont == nil:
				t.Errorf("no continuation, want %+v", tc.continuation)
			case tc.continuation != nil:
				if !cont.StartedAt.Equal(tc.continuation.StartedAt) || cont.Attempt != tc.continuation.Attempt {
					t.Errorf("continuation startedAt %v attempt %d, want %v %d", cont.StartedAt, cont.Attempt, tc.continuation.StartedAt, tc.continuation.Attempt)
				}
				inner, err := Parse(cont.Event)
				if err != nil || !reflect.DeepEqual(inner, tc.want) {
					t.Errorf("continuation event parses to %s, %v; want the original event", describe(inner), err)
				}
			default:
				// A plain event: Parse agrees with ParseInvocation.
				ev, err := Parse(payload)
				if err != nil || !reflect.DeepEqual(ev, got) {
					t.Errorf("Parse = %s, %v; want what ParseInvocation gave", describe(ev), err)
				}
			}
		})
	}
}

// describe spells out the pointed-to fields of an Event for failure messages.
func describe(e Event) string {
	s := fmt.Sprintf("%+v", e)
	if e.Lifecycle != nil {
		s += fmt.Sprintf(" Lifecycle=%+v", *e.Lifecycle)
	}
	if e.Spot != nil {
		s += fmt.Sprintf(" Spot=%+v", *e.Spot)
	}
	if e.Scheduled != nil {
		s += fmt.Sprintf(" Scheduled=%+v", *e.Scheduled)
	}
	if e.Capacity != nil {
		s += fmt.Sprintf(" Capacity=%+v", *e.Capacity)
	}
	if e.CapacityBlock != nil {
		s += fmt.Sprintf(" CapacityBlock=%+v", *e.CapacityBlock)
	}
	return s
}

// TestParseTestdata runs every file of testdata: the invalid payloads must
// give ErrMalformed and a zero Event, the others the kind they are.
func TestParseTestdata(t *testing.T) {
	type want struct {
		kind      Kind   // when no error is expected
		errSubstr string // when set, an ErrMalformed naming this
	}
	malformedBecause := func(s string) want { return want{errSubstr: s} }
	cases := map[string]want{
		// State-change: no guess, ever.
		"state-change-no-state.json":                 malformedBecause("state is missing"),
		"state-change-state-null.json":               malformedBecause("state is missing"),
		"state-change-unknown-state.json":            malformedBecause(`state "rebooting" is not an EC2 instance state`),
		"state-change-state-substring.json":          malformedBecause(`state "not-stopped" is not`),
		"state-change-state-capitalized.json":        malformedBecause(`state "Stopped" is not`),
		"state-change-state-number.json":             malformedBecause("decoding detail"),
		"state-change-instance-id-not-hex.json":      malformedBecause(`instance-id "i-0e4d7b1a96c23f58z" is not an EC2 instance id`),
		"state-change-instance-arn.json":             malformedBecause("is not an EC2 instance id"),
		"state-change-old-instance-id.json":          {kind: KindStateChange},
		"rebalance-uppercase-instance-id.json":       malformedBecause("is not an EC2 instance id"),
		"spot-interruption-bad-instance-id.json":     malformedBecause(`instance-id "i-0c95a1e47d3b2f86" is not`),
		"spot-interruption-missing-instance-id.json": malformedBecause("instance-id is missing"),
		"spot-interruption-unknown-action.json":      malformedBecause(`instance-action "reboot"`),

		// Capacity reservations: an interruptible reservation's warning
		// names its instance and may give its termination time; a Capacity
		// Block's names its reservation, under either detail-type.
		"capacity-interruption-missing-instance-id.json":    malformedBecause("instance-id is missing"),
		"capacity-interruption-missing-action.json":         malformedBecause("instance-action is missing"),
		"capacity-interruption-unknown-action.json":         malformedBecause(`instance-action "reboot" is not terminate, stop or hibernate`),
		"capacity-interruption-bad-termination-time.json":   malformedBecause(`instance-termination-time: "in two minutes" is not a time`),
		"capacity-interruption-no-termination-time.json":    {kind: KindCapacityInterruption},
		"capacity-interruption-interruptible-spelling.json": {kind: KindCapacityInterruption},
		"capacity-block-missing-reservation-id.json":        malformedBecause("capacity-reservation-id is missing"),
		"capacity-block-bad-reservation-id.json":            malformedBecause(`capacity-reservation-id "cr-1234567890abcdefg" is not a Capacity Reservation id`),
		"capacity-block-bad-end-date.json":                  malformedBecause(`end-date: "[ODCR End Date]" is not a time`),
		"capacity-block-reservation-spelling.json":          {kind: KindCapacityBlockExpiry},
		"capacity-block-delivered.json":                     {kind: KindUnknown},

		// Lifecycle actions: what CompleteLifecycleAction needs, and the
		// transition of the detail-type.
		"asg-terminate-missing-token.json":       malformedBecause("LifecycleActionToken is missing"),
		"asg-terminate-missing-hook-name.json":   malformedBecause("LifecycleHookName is missing"),
		"asg-terminate-blank-asg-name.json":      malformedBecause("AutoScalingGroupName is missing"),
		"asg-terminate-missing-instance-id.json": malformedBecause("EC2InstanceId is missing"),
		"asg-terminate-missing-transition.json":  malformedBecause("LifecycleTransition is missing"),
		"asg-terminate-wrong-transition.json":    malformedBecause(`LifecycleTransition "autoscaling:EC2_INSTANCE_LAUNCHING" does not match`),
		"asg-launch-wrong-transition.json":       malformedBecause(`LifecycleTransition "autoscaling:EC2_INSTANCE_TERMINATING" does not match`),
		"asg-terminate-warm-pool.json":           {kind: KindTerminate},
		"raw-asg-test-notification.json":         {kind: KindTestNotification},
		"lifecycle-without-envelope.json":        malformedBecause("not an EventBridge event"),

		// Envelope and detail shape.
		"truncated.json":               malformedBecause("decoding envelope"),
		"trailing-garbage.json":        malformedBecause("decoding envelope"),
		"array.json":                   malformedBecause("not a JSON object"),
		"json-null.json":               malformedBecause("not a JSON object"),
		"not-an-event.json":            malformedBecause("not an EventBridge event"),
		"detail-is-string.json":        malformedBecause("detail is missing or not a JSON object"),
		"detail-is-null.json":          malformedBecause("detail is missing or not a JSON object"),
		"detail-is-array.json":         malformedBecause("detail is missing or not a JSON object"),
		"detail-missing.json":          malformedBecause("detail is missing or not a JSON object"),
		"detail-empty.json":            malformedBecause("instance-id is missing; state is missing"),
		"envelope-missing-time.json":   malformedBecause("envelope has no time"),
		"envelope-bad-time.json":       malformedBecause("decoding envelope"),
		"envelope-missing-id.json":     malformedBecause("envelope has no id"),
		"envelope-missing-source.json": malformedBecause("no source or no detail-type"),

		// Not ours: ignored, no error.
		"foreign-source.json":                          {kind: KindUnknown},
		"ec2-other-detail-type.json":                   {kind: KindUnknown},
		"foreign-source-state-change-detail-type.json": {kind: KindUnknown},
		"health-other-service.json":                    {kind: KindUnknown},
		"health-other-category.json":                   {kind: KindUnknown},
		"health-dedicated-host.json":                   {kind: KindUnknown},

		// Health scheduled changes.
		"health-bad-instance-id.json":                  malformedBecause(`affectedEntities[1].entityValue "i-xyz" is not`),
		"health-no-affected-entities.json":             malformedBecause("affectedEntities is missing"),
		"health-missing-start-time.json":               malformedBecause("startTime is missing"),
		"health-bad-start-time.json":                   malformedBecause("startTime:"),
		"health-missing-status.json":                   malformedBecause("statusCode is missing"),
		"health-unknown-status.json":                   malformedBecause(`statusCode "Scheduled" is not upcoming, open or closed`),
		"health-rfc3339-times-duplicate-entities.json": {kind: KindScheduledChange},

		// Continuation wrappers.
		"continuation-bad-attempt.json":        malformedBecause("attempt 0 is not >= 1"),
		"continuation-missing-started-at.json": malformedBecause("startedAt is missing"),
		"continuation-extra-key.json":          malformedBecause("only top-level key"),
		"continuation-of-unknown-event.json":   malformedBecause("kind unknown is not one to continue"),
		"continuation-of-invalid-event.json":   malformedBecause("state is missing"),
		"continuation-nested.json":             malformedBecause("not an EventBridge event"),
		"continuation-event-is-string.json":    malformedBecause("not a JSON object"),
		// a Capacity Block's warning names no instance: its continuation may
		// name any well-formed one (the handler checks the reservation)
		"continuation-capacity-block-instance.json":     {kind: KindCapacityBlockExpiry},
		"continuation-capacity-block-bad-instance.json": malformedBecause(`instance "i-0f3c9a2e7b5d1c84" is not an EC2 instance id`),
	}
	checkCovered(t, testdataDir, cases)

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			payload, err := os.ReadFile(filepath.Join(testdataDir, name))
			if err != nil {
				t.Skip(err)
			}
			got, cont, err := ParseInvocation(payload)
			if tc.errSubstr != "" {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed", err)
				}
				if !strings.Contains(err.Error(), tc.errSubstr) {
					t.Errorf("err = %q, want it to say %q", err, tc.errSubstr)
				}
				if !reflect.DeepEqual(got, Event{}) || cont != nil {
					t.Errorf("on error got %+v, %v; want the zero Event and no continuation", got, cont)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v, want kind %s", err, tc.kind)
			}
			if got.Kind != tc.kind {
				t.Errorf("kind = %s, want %s", got.Kind, tc.kind)
			}
			if !tc.kind.Actionable() && (len(got.InstanceIDs) > 0 || got.Lifecycle != nil || got.Spot != nil || got.Scheduled != nil || got.State != "" ||
				got.Capacity != nil || got.CapacityBlock != nil) {
				t.Errorf("ignored event carries action fields: %s", describe(got))
			}
		})
	}
}

// TestParseDetails checks the fields of the valid extras of testdata.
func TestParseDetails(t *testing.T) {
	read := func(name string) Event {
		t.Helper()
		payload, err := os.ReadFile(filepath.Join(testdataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := Parse(payload)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}

	t.Run("health times in RFC 3339, entities deduplicated, hosts skipped", func(t *testing.T) {
		ev := read("health-rfc3339-times-duplicate-entities.json")
		if want := []string{"i-0f2a8c6e1d7b3e945"}; !reflect.DeepEqual(ev.InstanceIDs, want) {
			t.Errorf("InstanceIDs = %v, want %v", ev.InstanceIDs, want)
		}
		if want := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC); !ev.Scheduled.StartTime.Equal(want) || ev.Scheduled.StartTime.Location() != time.UTC {
			t.Errorf("StartTime = %v, want %v", ev.Scheduled.StartTime, want)
		}
		if want := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC); !ev.Scheduled.EndTime.Equal(want) {
			t.Errorf("EndTime = %v, want %v", ev.Scheduled.EndTime, want)
		}
	})
	t.Run("warm pool destination", func(t *testing.T) {
		ev := read("asg-terminate-warm-pool.json")
		if ev.Lifecycle.Origin != LocationAutoScalingGroup || ev.Lifecycle.Destination != LocationWarmPool {
			t.Errorf("origin %q destination %q, want AutoScalingGroup -> WarmPool", ev.Lifecycle.Origin, ev.Lifecycle.Destination)
		}
	})
	t.Run("raw test notification", func(t *testing.T) {
		ev := read("raw-asg-test-notification.json")
		want := Event{Kind: KindTestNotification, ID: "5e8b7c3a-0f2d-4a91-b6e4-c7d1a2f9e803", Source: "aws.autoscaling", Account: "123456789012", Time: mustTime(t, "2026-11-02T09:15:43.871Z")}
		if !reflect.DeepEqual(ev, want) {
			t.Errorf("got %+v, want %+v", ev, want)
		}
	})
	t.Run("capacity interruption without its termination time", func(t *testing.T) {
		ev := read("capacity-interruption-no-termination-time.json")
		if want := (CapacityInterruption{Action: SpotActionTerminate}); *ev.Capacity != want || !reflect.DeepEqual(ev.InstanceIDs, []string{"i-0a7e3c5f9b1d2e468"}) {
			t.Errorf("Capacity = %+v, instances %v; want %+v, the one instance", *ev.Capacity, ev.InstanceIDs, want)
		}
	})
	t.Run("the other spellings of the capacity detail-types", func(t *testing.T) {
		if ev := read("capacity-interruption-interruptible-spelling.json"); ev.Capacity == nil || !ev.Capacity.TerminationTime.Equal(time.Date(2026, 11, 20, 10, 17, 0, 0, time.UTC)) {
			t.Errorf("interruptible spelling: %s", describe(ev))
		}
		ev := read("capacity-block-reservation-spelling.json")
		if want := (CapacityBlockExpiry{ReservationID: "cr-0d4b8f2a6c1e9e357"}); ev.CapacityBlock == nil || *ev.CapacityBlock != want || len(ev.InstanceIDs) != 0 {
			t.Errorf("reservation spelling: %s, want %+v and no instance", describe(ev), want)
		}
	})
	t.Run("capacity block continuation narrowed to an instance", func(t *testing.T) {
		payload, err := os.ReadFile(filepath.Join(testdataDir, "continuation-capacity-block-instance.json"))
		if err != nil {
			t.Fatal(err)
		}
		ev, cont, err := ParseInvocation(payload)
		if err != nil || cont == nil || cont.Instance != "i-0f3c9a2e7b5d1c846" {
			t.Fatalf("ParseInvocation = %s, %+v, %v", describe(ev), cont, err)
		}
		if !reflect.DeepEqual(ev.InstanceIDs, []string{"i-0f3c9a2e7b5d1c846"}) || ev.CapacityBlock == nil || ev.CapacityBlock.ReservationID != "cr-0d4b8f2a6c1e9e357" {
			t.Errorf("got %s, want the block narrowed to i-0f3c9a2e7b5d1c846", describe(ev))
		}
	})
	t.Run("old 8-digit instance id", func(t *testing.T) {
		if ev := read("state-change-old-instance-id.json"); !reflect.DeepEqual(ev.InstanceIDs, []string{"i-4f8c2a1e"}) {
			t.Errorf("InstanceIDs = %v", ev.InstanceIDs)
		}
	})
	t.Run("unknown event keeps its envelope for the log", func(t *testing.T) {
		ev := read("foreign-source.json")
		if ev.Source != "aws.s3" || ev.DetailType != "Object Created" || ev.ID == "" {
			t.Errorf("got %+v", ev)
		}
	})
}

// TestParseInline covers payloads too small to deserve a file.
func TestParseInline(t *testing.T) {
	for _, tc := range []struct {
		name, payload string
		kind          Kind
		errSubstr     string
	}{
		{name: "empty", payload: "", errSubstr: "not a JSON object"},
		{name: "white space", payload: " \n", errSubstr: "not a JSON object"},
		{name: "empty object", payload: "{}", errSubstr: "not an EventBridge event"},
		{name: "string", payload: `"stopped"`, errSubstr: "not a JSON object"},
		{name: "unknown source, no detail", payload: `{"source":"aws.s3","detail-type":"Object Created"}`, kind: KindUnknown},
		{name: "test notification in launch envelope, by LifecycleTransition only",
			payload: `{"id":"x","time":"2026-11-02T09:15:44Z","source":"aws.autoscaling","detail-type":"EC2 Instance-launch Lifecycle Action","detail":{"LifecycleTransition":"autoscaling:TEST_NOTIFICATION"}}`,
			kind:    KindTestNotification},
		{name: "every lifecycle problem named at once",
			payload:   `{"id":"x","time":"2026-11-02T09:15:44Z","source":"aws.autoscaling","detail-type":"EC2 Instance-terminate Lifecycle Action","detail":{"EC2InstanceId":"i-1"}}`,
			errSubstr: `LifecycleActionToken is missing; AutoScalingGroupName is missing; LifecycleHookName is missing; EC2InstanceId "i-1" is not an EC2 instance id (i- and 8 or 17 hex digits); LifecycleTransition is missing`},
		{name: "state with spaces", payload: `{"id":"x","time":"2026-11-02T09:15:44Z","source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0e4d7b1a96c23f58d","state":" stopped"}}`,
			errSubstr: `state " stopped" is not`},
		{name: "long value cut in the message", payload: `{"id":"x","time":"2026-11-02T09:15:44Z","source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0e4d7b1a96c23f58d","state":"` + strings.Repeat("s", 1000) + `"}}`,
			errSubstr: strings.Repeat("s", 64) + `"...`},
		{name: "error names event and id", payload: `{"id":"abc-123","time":"2026-11-02T09:15:44Z","source":"aws.ec2","detail-type":"EC2 Instance Rebalance Recommendation","detail":{}}`,
			errSubstr: "malformed event: EC2 Instance Rebalance Recommendation abc-123: instance-id is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Parse([]byte(tc.payload))
			if tc.errSubstr != "" {
				if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.errSubstr) {
					t.Fatalf("err = %v, want ErrMalformed saying %q", err, tc.errSubstr)
				}
				if !reflect.DeepEqual(ev, Event{}) {
					t.Errorf("event = %+v on error, want zero", ev)
				}
				return
			}
			if err != nil || ev.Kind != tc.kind {
				t.Fatalf("got %s, %v; want %s", ev.Kind, err, tc.kind)
			}
		})
	}
}

func TestValidInstanceID(t *testing.T) {
	for id, want := range map[string]bool{
		"i-0b1f6e8d2c4a9f371":   true,
		"i-4f8c2a1e":            true,
		"":                      false,
		"i-":                    false,
		"i-4f8c2a1":             false, // 7
		"i-4f8c2a1e0":           false, // 9
		"i-0b1f6e8d2c4a9f37":    false, // 16
		"i-0b1f6e8d2c4a9f3710":  false, // 18
		"i-0B1F6E8D2C4A9F371":   false, // upper case
		"i-0b1f6e8d2c4a9f37g":   false,
		"I-0b1f6e8d2c4a9f371":   false,
		"h-0b1f6e8d2c4a9f371":   false,
		"i_0b1f6e8d2c4a9f371":   false,
		" i-0b1f6e8d2c4a9f371":  false,
		"i-0b1f6e8d2c4a9f371\n": false,
		"i-4f8c2a1é":            false,
	} {
		if got := validInstanceID(id); got != want {
			t.Errorf("validInstanceID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestParseHealthTime(t *testing.T) {
	want := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, s := range []string{
		"Tue, 1 Dec 2026 10:00:00 GMT",
		"Tue, 01 Dec 2026 10:00:00 GMT",
		"Tue, 1 Dec 2026 10:00:00 UTC",
		"2026-12-01T10:00:00Z",
		"2026-12-01T11:00:00+01:00",
	} {
		got, err := parseHealthTime(s)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("parseHealthTime(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "Tue, 1 Dec 2026 10:00:00 PST", "Tue, 1 Dec 2026", "1764583200", "2026-12-01 10:00:00"} {
		if got, err := parseHealthTime(s); err == nil {
			t.Errorf("parseHealthTime(%q) = %v, want an error", s, got)
		}
	}
}

func TestKindActionable(t *testing.T) {
	for k, want := range map[Kind]bool{
		KindTerminate: true, KindLaunch: true, KindSpotInterruption: true, KindRebalance: true,
		KindStateChange: true, KindScheduledChange: true, KindCapacityInterruption: true, KindCapacityBlockExpiry: true,
		KindTestNotification: false, KindSweep: false, KindUnknown: false, "": false, "drain": false,
	} {
		if got := k.Actionable(); got != want {
			t.Errorf("%q.Actionable() = %v, want %v", k, got, want)
		}
	}
}

// TestLogValue checks that logging an event never prints the lifecycle
// action token and uses the stable keys.
func TestLogValue(t *testing.T) {
	payload, err := os.ReadFile(filepath.Join(eventsDir, "asg-terminate.json"))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Parse(payload)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("handling", "event", ev)
	log.Info("completing", "lifecycle", ev.Lifecycle)
	out := buf.String()
	if strings.Contains(out, termTok) {
		t.Errorf("log carries the lifecycle action token: %s", out)
	}
	for _, s := range []string{`"instance":"i-0b1f6e8d2c4a9f371"`, `"asg":"` + asgName + `"`, `"hook":"node-drainer-terminate"`, `"kind":"terminate"`} {
		if !strings.Contains(out, s) {
			t.Errorf("log lacks %s: %s", s, out)
		}
	}
}

func TestValidReservationID(t *testing.T) {
	for id, want := range map[string]bool{
		"cr-0d4b8f2a6c1e9e357":  true,
		"cr-00000000000000000":  true,
		"":                      false,
		"cr-":                   false,
		"cr-0d4b8f2a6c1e9e35":   false, // 16
		"cr-0d4b8f2a6c1e9e3570": false, // 18
		"cr-1234567890abcdefg":  false, // the user guide's placeholder: g is not hex
		"cr-0D4B8F2A6C1E9E357":  false,
		"CR-0d4b8f2a6c1e9e357":  false,
		"cb-0d4b8f2a6c1e9e357":  false,
		"i-0d4b8f2a6c1e9e357":   false,
		" cr-0d4b8f2a6c1e9e357": false,
	} {
		if got := validReservationID(id); got != want {
			t.Errorf("validReservationID(%q) = %v, want %v", id, got, want)
		}
	}
}
