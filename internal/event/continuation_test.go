package event

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestContinuationRoundTrip wraps every actionable sample event and reads it
// back: same event, same start time and attempt.
func TestContinuationRoundTrip(t *testing.T) {
	startedAt := time.Date(2026, 11, 18, 15, 2, 38, 412000000, time.FixedZone("CET", 3600))
	for _, name := range jsonFiles(t, eventsDir) {
		payload, err := os.ReadFile(filepath.Join(eventsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := Parse(payload)
		if err != nil || !want.Kind.Actionable() {
			continue // test notification, continuation sample
		}
		t.Run(name, func(t *testing.T) {
			wrapped, err := NewContinuation(payload, startedAt, 3)
			if err != nil {
				t.Fatalf("NewContinuation: %v", err)
			}
			var shape map[string]map[string]json.RawMessage
			if err := json.Unmarshal(wrapped, &shape); err != nil {
				t.Fatalf("wrapper %s: %v", wrapped, err)
			}
			if len(shape) != 1 || len(shape[continuationKey]) != 3 {
				t.Errorf("wrapper %s, want only %s with event, startedAt, attempt", wrapped, continuationKey)
			}

			got, cont, err := ParseInvocation(wrapped)
			if err != nil {
				t.Fatalf("ParseInvocation: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("event:\n got %s\nwant %s", describe(got), describe(want))
			}
			if cont == nil {
				t.Fatal("no continuation")
			}
			if !cont.StartedAt.Equal(startedAt) || cont.Attempt != 3 {
				t.Errorf("startedAt %v attempt %d, want %v 3", cont.StartedAt, cont.Attempt, startedAt)
			}
			if again, err := Parse(cont.Event); err != nil || !reflect.DeepEqual(again, want) {
				t.Errorf("Continuation.Event parses to %s, %v", describe(again), err)
			}
		})
	}
}

func TestNewContinuationRejects(t *testing.T) {
	read := func(dir, name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	terminate := read(eventsDir, "asg-terminate.json")
	startedAt := time.Date(2026, 11, 18, 14, 2, 38, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		raw       []byte
		startedAt time.Time
		attempt   int
		errSubstr string
	}{
		{"attempt 0", terminate, startedAt, 0, "attempt 0 is not >= 1"},
		{"negative attempt", terminate, startedAt, -2, "attempt -2"},
		{"no start time", terminate, time.Time{}, 1, "startedAt is missing"},
		{"no event", nil, startedAt, 1, "event is missing"},
		{"test notification", read(eventsDir, "asg-test-notification.json"), startedAt, 1, "not one to continue"},
		{"unknown event", read(testdataDir, "foreign-source.json"), startedAt, 1, "not one to continue"},
		{"invalid event", read(testdataDir, "state-change-no-state.json"), startedAt, 1, "state is missing"},
		{"not JSON", []byte("{nope"), startedAt, 1, "decoding envelope"},
		{"a continuation itself", read(eventsDir, "continuation-asg-terminate.json"), startedAt, 2, "not an EventBridge event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewContinuation(tc.raw, tc.startedAt, tc.attempt)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.errSubstr) {
				t.Errorf("NewContinuation = %s, %v; want ErrMalformed saying %q", b, err, tc.errSubstr)
			}
			if b != nil {
				t.Errorf("payload %s returned with an error", b)
			}
		})
	}
}

// TestParseInvocationPlainEvent checks that a plain event gives no
// continuation, and that a near-miss of the wrapper key is not taken for one.
func TestParseInvocationPlainEvent(t *testing.T) {
	payload, err := os.ReadFile(filepath.Join(eventsDir, "spot-interruption.json"))
	if err != nil {
		t.Fatal(err)
	}
	ev, cont, err := ParseInvocation(payload)
	if err != nil || cont != nil || ev.Kind != KindSpotInterruption {
		t.Errorf("got %s, %+v, %v; want a spot interruption and no continuation", ev.Kind, cont, err)
	}

	wrapped, err := NewContinuation(payload, time.Now(), 1)
	if err != nil {
		t.Fatal(err)
	}
	miscased := strings.Replace(string(wrapped), continuationKey, "NodeDrainerContinuation", 1)
	if ev, cont, err := ParseInvocation([]byte(miscased)); !errors.Is(err, ErrMalformed) || cont != nil || !reflect.DeepEqual(ev, Event{}) {
		t.Errorf("miscased wrapper: got %s, %+v, %v; want ErrMalformed", ev.Kind, cont, err)
	}
}

func TestContinuationCheck(t *testing.T) {
	now := time.Date(2026, 11, 18, 15, 0, 0, 0, time.UTC)
	const drainTimeout = 30 * time.Minute
	for _, tc := range []struct {
		name      string
		startedAt time.Time
		attempt   int
		errSubstr string // "" accepted
	}{
		{"first invocation, now", now, 1, ""},
		{"last allowed continuation", now.Add(-10 * time.Minute), 21, ""},
		{"one past the limit", now.Add(-10 * time.Minute), 22, "attempt 22 is continuation 21, past the limit of 20"},
		{"far past the limit", now, 1000, "past the limit"},
		{"within clock skew", now.Add(ContinuationClockSkew - time.Second), 2, ""},
		{"in the future", now.Add(time.Hour), 2, "is 1h0m0s in the future"},
		{"as old as timeout plus slack", now.Add(-drainTimeout - ContinuationSlack), 2, ""},
		{"older than timeout plus slack", now.Add(-drainTimeout - ContinuationSlack - time.Second), 2, "older than the drain timeout 30m0s plus 15m0s"},
		{"a year old", now.AddDate(-1, 0, 0), 2, "older than the drain timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Continuation{StartedAt: tc.startedAt, Attempt: tc.attempt}.Check(now, 20, drainTimeout)
			if tc.errSubstr == "" {
				if err != nil {
					t.Errorf("Check = %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, ErrContinuationRefused) || !strings.Contains(err.Error(), tc.errSubstr) {
				t.Errorf("Check = %v, want ErrContinuationRefused saying %q", err, tc.errSubstr)
			}
		})
	}
	if err := (Continuation{StartedAt: now, Attempt: 2}).Check(now, 0, drainTimeout); !errors.Is(err, ErrContinuationRefused) {
		t.Errorf("MAX_CONTINUATIONS=0: Check of a continuation = %v, want refused", err)
	}
	// the lease holders it names: at most one an attempt before it
	if err := (Continuation{StartedAt: now, Attempt: 3, Holders: []string{"a", "b"}}).Check(now, 20, drainTimeout); err != nil {
		t.Errorf("two holders named by attempt 3: Check = %v, want accepted", err)
	}
	if err := (Continuation{StartedAt: now, Attempt: 2, Holders: []string{"a", "b", "c"}}).Check(now, 20, drainTimeout); !errors.Is(err, ErrContinuationRefused) {
		t.Errorf("three holders named by attempt 2: Check = %v, want refused", err)
	}
}

// A continuation for one instance of a multi-instance Health event parses to
// that instance alone; an instance the event does not list is refused.
func TestContinuationForOneInstance(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(eventsDir, "scheduled-change.json"))
	if err != nil {
		t.Fatal(err)
	}
	startedAt := time.Date(2026, 11, 18, 15, 0, 0, 0, time.UTC)
	payload, err := NewContinuationFor(raw, startedAt, 1, "i-4f8c2a1e")
	if err != nil {
		t.Fatal(err)
	}
	ev, cont, err := ParseInvocation(payload)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ev.InstanceIDs, []string{"i-4f8c2a1e"}) || cont.Instance != "i-4f8c2a1e" || cont.Attempt != 1 {
		t.Errorf("got instances %v, continuation %+v; want only i-4f8c2a1e, attempt 1", ev.InstanceIDs, cont)
	}
	if ev.Scheduled == nil || ev.Scheduled.Status != HealthUpcoming {
		t.Errorf("scheduled change lost: %+v", ev.Scheduled)
	}
	if b, err := NewContinuationFor(raw, startedAt, 1, "i-0123456789abcdef0"); !errors.Is(err, ErrMalformed) || b != nil {
		t.Errorf("instance not in the event: got %s, %v; want ErrMalformed", b, err)
	}
}
