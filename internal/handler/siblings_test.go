package handler

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// TestSiblingHooksCompleted: two hooks of ours on the terminate transition
// (HOOK_NAMES names an old one beside TERMINATE_HOOK_NAME): the drain
// completes its own action by its token and the other's by the instance,
// with the same result; another tool's hook on the same transition, and a
// hook of ours on the launch transition, are not touched.
func TestSiblingHooksCompleted(t *testing.T) {
	hookOn := func(name, transition string) astypes.LifecycleHook {
		return astypes.LifecycleHook{LifecycleHookName: aws.String(name), LifecycleTransition: aws.String(transition), HeartbeatTimeout: aws.Int32(300)}
	}
	const term, launch = "autoscaling:EC2_INSTANCE_TERMINATING", "autoscaling:EC2_INSTANCE_LAUNCHING"
	for _, tc := range []struct {
		name      string
		hookNames []string
		throttled int      // the sibling's completion throttled this many times first
		want      []string // the hooks completed, in order
	}{
		{"a second hook of ours", []string{"legacy-terminate", "legacy-launch"}, 0, []string{"node-drainer-terminate", "legacy-terminate"}},
		// tried again, else the sibling waits out its timeout (the
		// simulation's I3, seed 9552)
		{"the sibling's completion throttled twice", []string{"legacy-terminate"}, 2, []string{"node-drainer-terminate", "legacy-terminate"}},
		{"no HOOK_NAMES: none looked for", nil, 0, []string{"node-drainer-terminate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA] = []reading{running}
			e.cfg.HookNames = tc.hookNames
			e.asg.completeFail = map[string]int{"legacy-terminate": tc.throttled}
			e.asg.hooks = []astypes.LifecycleHook{hookOn("node-drainer-terminate", term), hookOn("legacy-terminate", term),
				hookOn("nth-terminate", term), hookOn("legacy-launch", launch)}
			out, err := e.handle(t, terminateEvent(idA), 5*time.Second)
			if err != nil || out.Action != ActionDrained {
				t.Fatalf("drain: %+v, %v", out, err)
			}
			var got []string
			for i, in := range e.asg.completed {
				got = append(got, aws.ToString(in.LifecycleHookName))
				if aws.ToString(in.LifecycleActionResult) != "CONTINUE" || aws.ToString(in.InstanceId) != idA {
					t.Errorf("completion %d: %s for %s, want CONTINUE for %s", i, aws.ToString(in.LifecycleActionResult), aws.ToString(in.InstanceId), idA)
				}
				if own := i == 0; own != (in.LifecycleActionToken != nil) {
					t.Errorf("completion %d of %s: token %v; want its own by token, the other's by the instance", i, got[i], in.LifecycleActionToken)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("hooks completed %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSiblingHooksHeartbeated: a drain held by a PDB for longer than the
// heartbeat timeout of a sibling (a hook of ours by HOOK_NAMES on the same
// transition, 60 s, ABANDON, beside our 300 s hook) keeps the sibling's
// action alive too, by the instance, at half the shorter timeout: it never
// goes a timeout without a heartbeat from the drain's start to its
// completion (rule 17), else Auto Scaling would end it with ABANDON and the
// instance would terminate mid-drain. Another tool's hook on the transition
// is never heartbeated (rule 14). In a bubble: the drain's minutes pass at
// once.
func TestSiblingHooksHeartbeated(t *testing.T) {
	t.Run("read", func(t *testing.T) { siblingsHeartbeated(t, 0) })
	// the group's hooks unread at the drain's start (a throttle): the read
	// is made again, else the sibling would never be heartbeated (found by
	// the simulation's H5, seed 8262)
	t.Run("read-again", func(t *testing.T) { siblingsHeartbeated(t, 2) })
}

func siblingsHeartbeated(t *testing.T, readFails int) {
	synctest.Test(t, func(t *testing.T) {
		const term = "autoscaling:EC2_INSTANCE_TERMINATING"
		hookOn := func(name string, timeout int32, result string) astypes.LifecycleHook {
			return astypes.LifecycleHook{LifecycleHookName: aws.String(name), LifecycleTransition: aws.String(term),
				HeartbeatTimeout: aws.Int32(timeout), DefaultResult: aws.String(result)}
		}
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		e.cfg.HookNames = []string{"legacy-terminate"}
		e.asg.hooks = []astypes.LifecycleHook{hookOn("node-drainer-terminate", 300, "CONTINUE"),
			hookOn("legacy-terminate", 60, "ABANDON"), hookOn("nth-terminate", 30, "CONTINUE")}
		e.asg.hooksFail = readFails
		e.blocked = []string{"db-0"} // a PDB allows no disruption, for 3 minutes
		go func() {
			time.Sleep(3 * time.Minute)
			e.mu.Lock()
			e.blocked = nil
			e.mu.Unlock()
		}()
		start := time.Now()
		out, err := e.handle(t, terminateEvent(idA), 14*time.Minute)
		end := time.Now()
		if err != nil || out.Action != ActionDrained {
			t.Fatalf("drain: %+v, %v", out, err)
		}
		if d := end.Sub(start); d < 3*time.Minute {
			t.Fatalf("drained after %s: want the drain held for 3 minutes", d)
		}
		beats := e.asg.beatsOf("legacy-terminate")
		last := start
		for _, b := range beats {
			if b.byToken {
				t.Errorf("the sibling heartbeated by a token: want by the instance (its token is in an event this invocation has not seen)")
			}
			if gap := b.at.Sub(last); gap >= time.Minute {
				t.Errorf("the sibling went %s without a heartbeat (from %s into the drain): past its 60 s timeout", gap, last.Sub(start))
			}
			last = b.at
		}
		if gap := end.Sub(last); gap >= time.Minute {
			t.Errorf("the sibling went its last %s before the completion without a heartbeat (%d heartbeats in a %s drain): past its 60 s timeout",
				gap, len(beats), end.Sub(start))
		}
		if n := len(e.asg.beatsOf("nth-terminate")); n != 0 {
			t.Errorf("another tool's hook heartbeated %d times", n)
		}
		var completed []string
		for _, in := range e.asg.completed {
			completed = append(completed, aws.ToString(in.LifecycleHookName))
		}
		if !slices.Equal(completed, []string{"node-drainer-terminate", "legacy-terminate"}) {
			t.Errorf("completed %v: want our hook and its sibling", completed)
		}
	})
}

func TestSiblingHooks(t *testing.T) {
	h := func(name, tr string) astypes.LifecycleHook {
		return astypes.LifecycleHook{LifecycleHookName: aws.String(name), LifecycleTransition: aws.String(tr)}
	}
	hooks := []astypes.LifecycleHook{h("a", "T"), h("b", "T"), h("c", "T"), h("d", "L")}
	if got := siblingHooks(hooks, "a", []string{"a", "b", "d"}); !slices.Equal(got, []string{"b"}) {
		t.Errorf("siblings of a: %v, want [b] (c not ours, d another transition)", got)
	}
	if got := siblingHooks(hooks, "x", []string{"a", "b"}); got != nil {
		t.Errorf("siblings of a hook the group does not have: %v, want none", got)
	}
}

// TestLateHookHeartbeatRetried: an event that comes late (its hook past
// half its timeout) is heartbeated at once; a throttled heartbeat then is
// tried again within seconds, not an interval later, past the timeout
// (rule 3; the simulation's I3, seed 5628: 154 s late on a 300 s hook, the
// next heartbeat 150 s later).
func TestLateHookHeartbeatRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.ec2.readings[idA] = []reading{running}
		e.asg.hooks = []astypes.LifecycleHook{{LifecycleHookName: aws.String("node-drainer-terminate"),
			LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE")}}
		e.asg.beatFail = 1
		e.blocked = []string{"db-0"}
		go func() {
			time.Sleep(40 * time.Second)
			e.mu.Lock()
			e.blocked = nil
			e.mu.Unlock()
		}()
		late := envelope("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", time.Now().Add(-200*time.Second), map[string]string{
			"LifecycleActionToken": token, "AutoScalingGroupName": asgName, "LifecycleHookName": "node-drainer-terminate",
			"EC2InstanceId": idA, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"})
		start := time.Now()
		if out, err := e.handle(t, late, 14*time.Minute); err != nil || out.Action != ActionDrained {
			t.Fatalf("drain: %+v, %v", out, err)
		}
		beats := e.asg.beatsOf("node-drainer-terminate")
		if len(beats) < 2 || beats[1].at.Sub(start) > 10*time.Second {
			var at []string
			for _, b := range beats {
				at = append(at, b.at.Sub(start).String())
			}
			t.Fatalf("heartbeats at %v into the drain: want the throttled one at once tried again within 10 s", at)
		}
	})
}
