package event

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestSweptEvents: the lifecycle events the sweep makes parse back to the
// action they name, without a token; only the sweep's source may omit it.
func TestSweptEvents(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, kind := range []Kind{KindTerminate, KindLaunch} {
		a := LifecycleAction{AutoScalingGroupName: "asg", HookName: "hook", InstanceID: "i-0123456789abcdef0"}
		if kind == KindLaunch {
			a.Destination = LocationWarmPool // an instance the sweep found entering a warm pool
		}
		raw, err := NewSwept(kind, a, "us-east-1", now)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		want := a
		want.Transition = TransitionTerminating
		if kind == KindLaunch {
			want.Transition = TransitionLaunching
		}
		if ev.Kind != kind || ev.Source != SourceSweep || !ev.Time.Equal(now) || !reflect.DeepEqual(*ev.Lifecycle, want) {
			t.Errorf("%s: parsed %+v lifecycle %+v, want %+v", kind, ev, ev.Lifecycle, want)
		}
		// a continuation of a swept drain carries it
		cont, err := NewContinuation(raw, now, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ev2, c, err := ParseInvocation(cont); err != nil || c == nil || ev2.Lifecycle.Token != "" || ev2.Kind != kind {
			t.Errorf("%s: continuation parsed %+v, %+v, %v", kind, ev2, c, err)
		}
		// Auto Scaling's own source without a token is malformed
		var env map[string]any
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatal(err)
		}
		env["source"] = "aws.autoscaling"
		b, _ := json.Marshal(env)
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: aws.autoscaling event without a token: %v, want malformed", kind, err)
		}
	}
	if _, err := NewSwept(KindStateChange, LifecycleAction{}, "us-east-1", now); err == nil {
		t.Error("NewSwept made a state change")
	}
}
