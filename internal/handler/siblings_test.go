package handler

import (
	"slices"
	"testing"
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
		want      []string // the hooks completed, in order
	}{
		{"a second hook of ours", []string{"legacy-terminate", "legacy-launch"}, []string{"node-drainer-terminate", "legacy-terminate"}},
		{"no HOOK_NAMES: none looked for", nil, []string{"node-drainer-terminate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			e.ec2.readings[idA] = []reading{running}
			e.cfg.HookNames = tc.hookNames
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
