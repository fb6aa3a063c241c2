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
