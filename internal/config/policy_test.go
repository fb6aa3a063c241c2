package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// GROUP_POLICY_TAGS is off and LB_DRAIN_WAIT 0 by default (today's
// behaviour); LB_DRAIN_WAIT takes 0 or a positive duration.
func TestPolicySettings(t *testing.T) {
	c, err := FromEnv(env("CLUSTER_NAME=prod"))
	if err != nil || c.Policy != (Policy{}) {
		t.Fatalf("defaults: %+v, %v; want the zero Policy", c.Policy, err)
	}
	c, err = FromEnv(env("CLUSTER_NAME=prod", "GROUP_POLICY_TAGS=true", "LB_DRAIN_WAIT=5m"))
	if err != nil || c.Policy != (Policy{GroupTags: true, LBDrainWait: 5 * time.Minute}) {
		t.Fatalf("set: %+v, %v", c.Policy, err)
	}
	for _, bad := range []string{"LB_DRAIN_WAIT=-1s", "LB_DRAIN_WAIT=5", "LB_DRAIN_WAIT=5 m", "GROUP_POLICY_TAGS=yes-please"} {
		if _, err := FromEnv(env("CLUSTER_NAME=prod", bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if c, err := FromEnv(env("CLUSTER_NAME=prod", "LB_DRAIN_WAIT=0")); err != nil || c.LBDrainWait != 0 {
		t.Errorf("LB_DRAIN_WAIT=0: %s, %v", c.LBDrainWait, err)
	}
}

// A group's tags: the actions and a drain timeout within the hook's limit
// are taken; a bad value is refused, said, and leaves the setting's own;
// other tags are not looked at.
func TestGroupPolicy(t *testing.T) {
	c := Config{DrainTimeout: 30 * time.Minute, HeartbeatTimeout: 300 * time.Second}
	if got := c.MaxDrainTimeout(); got != 30000*time.Second {
		t.Errorf("MaxDrainTimeout %s, want 100 heartbeat timeouts", got)
	}
	if got := (Config{DrainTimeout: time.Hour, HeartbeatTimeout: 7200 * time.Second}).MaxDrainTimeout(); got != 48*time.Hour {
		t.Errorf("MaxDrainTimeout %s, want 48h at most", got)
	}
	for _, tc := range []struct {
		name    string
		tags    map[string]string
		want    GroupOverrides
		refused string
	}{
		{"none", map[string]string{"Name": "x", enabledTag: "true"}, GroupOverrides{}, ""},
		{"all taken", map[string]string{TagRebalanceAction: "Drain", TagScheduledChangeAction: "ignore", TagDrainTimeout: "2h"},
			GroupOverrides{RebalanceAction: ActionDrain, ScheduledChangeAction: ActionIgnore, DrainTimeout: 2 * time.Hour}, ""},
		{"bad action", map[string]string{TagRebalanceAction: "evict", TagDrainTimeout: "45m"}, GroupOverrides{DrainTimeout: 45 * time.Minute}, TagRebalanceAction},
		{"not a duration", map[string]string{TagDrainTimeout: "an hour"}, GroupOverrides{}, TagDrainTimeout},
		{"zero", map[string]string{TagDrainTimeout: "0s"}, GroupOverrides{}, TagDrainTimeout},
		{"past the hook's limit", map[string]string{TagDrainTimeout: "9h"}, GroupOverrides{}, TagDrainTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.GroupPolicy(tc.tags)
			refused := got.Refused
			got.Refused = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("overrides %+v, want %+v", got, tc.want)
			}
			switch {
			case tc.refused == "" && len(refused) > 0:
				t.Errorf("refused %v, want none", refused)
			case tc.refused != "" && (len(refused) != 1 || !strings.HasPrefix(refused[0], tc.refused+"=")):
				t.Errorf("refused %v, want %s", refused, tc.refused)
			}
		})
	}
}

// enabledTag is the templates' ASG_TAG_KEY: not a policy tag.
const enabledTag = "node-drainer.io/enabled"
