package event

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzParseInvocation feeds ParseInvocation arbitrary payloads, seeded with
// every sample event, every testdata payload and continuation wrappers of
// the samples. It checks the promises the handler relies on:
//   - no panic;
//   - an error wraps ErrMalformed and comes with the zero Event and no
//     continuation;
//   - an actionable event names at least one instance, each a valid id, no
//     duplicates; the fields of its kind are set and consistent, the others
//     empty; a lifecycle action has its token, group and hook;
//   - an ignored event carries nothing to act upon;
//   - a continuation has attempt >= 1, a start time, and an inner event that
//     parses to the same Event (narrowed to its instance, if it names one);
//   - an actionable plain event wraps into a continuation that reads back to
//     the same Event.
func FuzzParseInvocation(f *testing.F) {
	startedAt := time.Date(2026, 11, 18, 14, 2, 38, 0, time.UTC)
	for _, dir := range []string{eventsDir, testdataDir} {
		for _, name := range jsonFiles(f, dir) {
			payload, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(payload)
			if wrapped, err := NewContinuation(payload, startedAt, 1); err == nil {
				f.Add(wrapped)
			}
		}
	}
	for _, s := range []string{
		"", "{}", "null", "[]", `"x"`,
		`{"nodeDrainerContinuation":{}}`,
		`{"nodeDrainerContinuation":{"event":{},"startedAt":"2026-11-18T14:02:38Z","attempt":1}}`,
		`{"nodeDrainerContinuation":null}`,
		`{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","id":"1","time":"2026-11-18T14:02:38Z","detail":{"instance-id":"i-0123456789abcdef0","state":"stopped","State":"running"}}`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, payload []byte) {
		ev, cont, err := ParseInvocation(payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			if !reflect.DeepEqual(ev, Event{}) || cont != nil {
				t.Fatalf("error %v came with %s, %+v; want the zero Event and no continuation", err, describe(ev), cont)
			}
			return
		}
		checkEvent(t, ev)

		if cont != nil {
			if cont.Attempt < 1 || cont.StartedAt.IsZero() {
				t.Fatalf("continuation with attempt %d startedAt %v", cont.Attempt, cont.StartedAt)
			}
			inner, err := Parse(cont.Event)
			if err == nil && cont.Instance != "" {
				inner.InstanceIDs = []string{cont.Instance} // narrowed to one instance
			}
			if err != nil || !sameEvent(inner, ev) {
				t.Fatalf("continuation event parses to %s, %v; want %s", describe(inner), err, describe(ev))
			}
			return
		}

		plain, err := Parse(payload)
		if err != nil || !sameEvent(plain, ev) {
			t.Fatalf("Parse = %s, %v; ParseInvocation gave %s", describe(plain), err, describe(ev))
		}
		if !ev.Kind.Actionable() {
			return
		}
		wrapped, err := NewContinuation(payload, startedAt, 2)
		if err != nil {
			t.Fatalf("NewContinuation of an actionable event: %v", err)
		}
		back, bc, err := ParseInvocation(wrapped)
		if err != nil || bc == nil || bc.Attempt != 2 || !bc.StartedAt.Equal(startedAt) || !sameEvent(back, ev) {
			t.Fatalf("continuation round trip: %s, %+v, %v; want %s", describe(back), bc, err, describe(ev))
		}
	})
}

// checkEvent checks the invariants of an Event Parse returned without error.
func checkEvent(t *testing.T, ev Event) {
	t.Helper()
	switch ev.Kind {
	case KindTerminate, KindLaunch, KindSpotInterruption, KindRebalance, KindStateChange, KindScheduledChange,
		KindCapacityInterruption, KindCapacityBlockExpiry, KindTestNotification, KindSweep, KindUnknown:
	default:
		t.Fatalf("kind %q is none of the constants", ev.Kind)
	}

	if !ev.Kind.Actionable() {
		if len(ev.InstanceIDs) > 0 || ev.Lifecycle != nil || ev.Spot != nil || ev.State != "" || ev.Scheduled != nil ||
			ev.Capacity != nil || ev.CapacityBlock != nil {
			t.Fatalf("ignored event carries action fields: %s", describe(ev))
		}
		return
	}

	if len(ev.InstanceIDs) == 0 && ev.Kind != KindCapacityBlockExpiry {
		t.Fatalf("actionable event without instance: %s", describe(ev))
	}
	seen := make(map[string]bool)
	for _, id := range ev.InstanceIDs {
		if !validInstanceID(id) {
			t.Fatalf("invalid instance id %q in %s", id, describe(ev))
		}
		if seen[id] {
			t.Fatalf("instance id %q twice in %s", id, describe(ev))
		}
		seen[id] = true
	}
	if ev.ID == "" || ev.Time.IsZero() {
		t.Fatalf("actionable event without id or time: %s", describe(ev))
	}
	switch n := len(ev.InstanceIDs); {
	case ev.Kind == KindCapacityBlockExpiry && n > 1, ev.Kind != KindScheduledChange && ev.Kind != KindCapacityBlockExpiry && n != 1:
		t.Fatalf("%s event with %d instances", ev.Kind, n)
	}

	lifecycle := ev.Kind == KindTerminate || ev.Kind == KindLaunch
	if lifecycle != (ev.Lifecycle != nil) || (ev.Kind == KindSpotInterruption) != (ev.Spot != nil) ||
		(ev.Kind == KindStateChange) != (ev.State != "") || (ev.Kind == KindScheduledChange) != (ev.Scheduled != nil) ||
		(ev.Kind == KindCapacityInterruption) != (ev.Capacity != nil) || (ev.Kind == KindCapacityBlockExpiry) != (ev.CapacityBlock != nil) {
		t.Fatalf("kind-specific fields do not match kind: %s", describe(ev))
	}
	switch ev.Kind {
	case KindTerminate, KindLaunch:
		l := ev.Lifecycle
		if strings.TrimSpace(l.Token) == "" || strings.TrimSpace(l.AutoScalingGroupName) == "" || strings.TrimSpace(l.HookName) == "" {
			t.Fatalf("lifecycle action without token, group or hook: %s", describe(ev))
		}
		if l.InstanceID != ev.InstanceIDs[0] {
			t.Fatalf("lifecycle instance %q, event instance %q", l.InstanceID, ev.InstanceIDs[0])
		}
		want := TransitionTerminating
		if ev.Kind == KindLaunch {
			want = TransitionLaunching
		}
		if l.Transition != want {
			t.Fatalf("%s event with transition %q", ev.Kind, l.Transition)
		}
	case KindSpotInterruption:
		switch ev.Spot.Action {
		case SpotActionTerminate, SpotActionStop, SpotActionHibernate:
		default:
			t.Fatalf("spot action %q", ev.Spot.Action)
		}
	case KindStateChange:
		switch ev.State {
		case StatePending, StateRunning, StateStopping, StateStopped, StateShuttingDown, StateTerminated:
		default:
			t.Fatalf("state %q", ev.State)
		}
	case KindScheduledChange:
		if ev.Scheduled.StartTime.IsZero() || ev.Scheduled.EventTypeCode == "" {
			t.Fatalf("scheduled change without start time or type: %s", describe(ev))
		}
	case KindCapacityInterruption:
		switch ev.Capacity.Action {
		case SpotActionTerminate, SpotActionStop, SpotActionHibernate:
		default:
			t.Fatalf("capacity interruption action %q", ev.Capacity.Action)
		}
	case KindCapacityBlockExpiry:
		if !validReservationID(ev.CapacityBlock.ReservationID) {
			t.Fatalf("capacity block without a valid reservation id: %s", describe(ev))
		}
	}
}

// sameEvent compares events, times by instant: a time parsed twice from an
// offset like +02:00 gets two distinct *time.Location.
func sameEvent(a, b Event) bool {
	norm := func(e Event) Event {
		e.Time = e.Time.UTC()
		if e.Scheduled != nil {
			s := *e.Scheduled
			s.StartTime, s.EndTime = s.StartTime.UTC(), s.EndTime.UTC()
			e.Scheduled = &s
		}
		if e.Capacity != nil {
			c := *e.Capacity
			c.TerminationTime = c.TerminationTime.UTC()
			e.Capacity = &c
		}
		if e.CapacityBlock != nil {
			c := *e.CapacityBlock
			c.EndDate = c.EndDate.UTC()
			e.CapacityBlock = &c
		}
		return e
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
