package handler

import (
	"errors"
	"strings"
	"testing"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

// Every case whoseHook decides (rules 4, 9, 14): a lifecycle action is ours
// by its group and its hook's name, then by its instance; the readings are
// asked for one at a time, and only when the decision needs them.
func TestWhoseHook(t *testing.T) {
	const (
		group     = "workers"
		ourHook   = "nd-terminate"
		clusterTK = "kubernetes.io/cluster/c1"
	)
	errEC2 := errors.New("ec2: throttled")
	errTags := errors.New("autoscaling: 503")
	errNoNode := errors.New("node not found")
	base := config.Config{TerminateHookName: ourHook, LaunchHookName: "nd-launch", ClusterTagKey: clusterTK, ClusterName: "c1"}
	listed := func(c config.Config) config.Config { c.ASGNames = []string{group}; return c }
	others := func(c config.Config) config.Config { c.ASGNames = []string{"other-group"}; return c }
	byTag := func(c config.Config) config.Config { c.ASGTagKey, c.ASGTagValue = "node-drainer", "on"; return c }
	anyGroup := func(c config.Config) config.Config { return c } // neither ASG_NAMES nor ASG_TAG_KEY: every group

	ours := ec2Reading{read: true, ours: true, inst: instance.Instance{ID: "i-1", Found: true, Tags: map[string]string{clusterTK: "owned"}}}
	foreign := ec2Reading{read: true, inst: instance.Instance{ID: "i-1", Found: true}}
	otherCluster := ec2Reading{read: true, inst: instance.Instance{ID: "i-1", Found: true, Tags: map[string]string{"kubernetes.io/cluster/c2": "owned"}}}
	otherEKS := ec2Reading{read: true, inst: instance.Instance{ID: "i-1", Found: true, Tags: map[string]string{"eks:cluster-name": "c2"}}}
	sameEKS := ec2Reading{read: true, inst: instance.Instance{ID: "i-1", Found: true, Tags: map[string]string{"eks:cluster-name": "c1"}}}
	unreadable := ec2Reading{read: true, err: errEC2}
	carries := tagReading{read: true, carries: true}

	type want struct {
		need    need
		verdict verdict
		tagged  bool
		why     string // a part of it; "" checks that it is empty
		err     error  // errors.Is
	}
	for _, tc := range []struct {
		name string
		cfg  config.Config
		f    hookFacts
		want want
	}{
		// rule 14: the group, then the hook by its name
		{"group not listed, no tag selection: not ours", others(base), hookFacts{attempt: 1},
			want{verdict: verdictNotOurs, why: "ASG workers is not in ASG_NAMES"}},
		{"another tool's hook on a listed group: not ours", listed(base), hookFacts{act: lifecycle.Action{Hook: "karpenter-terminate"}, attempt: 1},
			want{verdict: verdictNotOurs, why: "hook karpenter-terminate is not node-drainer's (TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME, HOOK_NAMES: nd-launch, nd-terminate)"}},
		{"another tool's hook on a tagged group, continuation: not ours", byTag(base), hookFacts{act: lifecycle.Action{Hook: "other"}, attempt: 3},
			want{verdict: verdictNotOurs, why: "hook other is not node-drainer's"}},
		{"listed group: EC2 read next", listed(base), hookFacts{attempt: 1},
			want{need: needEC2}},
		{"no group selection at all: every group, EC2 read next", anyGroup(base), hookFacts{attempt: 1},
			want{need: needEC2}},
		{"tag selection, continuation: ours by its first invocation, tags not read", byTag(base), hookFacts{attempt: 2},
			want{need: needEC2, tagged: true}},
		{"tag selection, no Auto Scaling client: not ours", byTag(base), hookFacts{attempt: 1},
			want{verdict: verdictNotOurs, why: "ASG workers is not in ASG_NAMES, and there is no Auto Scaling client to read its tags"}},
		{"tag selection: the group's tags read first", byTag(base), hookFacts{attempt: 1, canReadTags: true},
			want{need: needGroupTags}},
		{"tags unreadable, terminate: heartbeated for the retry, the error returned", byTag(base), hookFacts{attempt: 1, canReadTags: true, tags: tagReading{read: true, err: errTags}},
			want{verdict: verdictHeartbeatRetry, err: errTags}},
		{"tags unreadable, launch: nothing done, the error returned (as with EC2 unreadable)", byTag(base), hookFacts{kind: event.KindLaunch, attempt: 1, canReadTags: true, tags: tagReading{read: true, err: errTags}},
			want{verdict: verdictUnreadable, err: errTags}},
		{"group lacks the tag: not ours", byTag(base), hookFacts{attempt: 1, canReadTags: true, tags: tagReading{read: true}},
			want{verdict: verdictNotOurs, why: "ASG workers is not in ASG_NAMES and does not carry the tag node-drainer=on"}},
		{"group carries the tag but names another cluster: not ours", byTag(base), hookFacts{attempt: 1, canReadTags: true, tags: tagReading{read: true, elsewhere: "kubernetes.io/cluster/c2"}},
			want{verdict: verdictNotOurs, why: "ASG workers carries the tag node-drainer=on but names another cluster (kubernetes.io/cluster/c2)"}},
		{"group carries the tag: EC2 read next", byTag(base), hookFacts{attempt: 1, canReadTags: true, tags: carries},
			want{need: needEC2, tagged: true}},
		{"listed group read before the tag: tags never read", byTag(listed(base)), hookFacts{attempt: 1, canReadTags: true},
			want{need: needEC2}},

		// rule 4: the instance
		{"this cluster's instance: ours", listed(base), hookFacts{attempt: 1, ec2: ours},
			want{verdict: verdictOurs}},
		{"this cluster's instance, tagged group: ours", byTag(base), hookFacts{attempt: 1, canReadTags: true, tags: carries, ec2: ours},
			want{verdict: verdictOurs, tagged: true}},
		{"launch, tagged group, this cluster's: ours", byTag(base), hookFacts{kind: event.KindLaunch, attempt: 1, canReadTags: true, tags: carries, ec2: ours},
			want{verdict: verdictOurs, tagged: true}},
		{"foreign instance, any group: not ours, EC2's reading says why", anyGroup(base), hookFacts{attempt: 1, ec2: foreign},
			want{verdict: verdictNotOurs}},
		{"foreign instance, listed group: completed, nothing drained", listed(base), hookFacts{kind: event.KindTerminate, attempt: 1, ec2: foreign},
			want{verdict: verdictCompleteOnly, why: "; its ASG is in ASG_NAMES: lifecycle action completed, nothing drained"}},
		{"foreign instance, tagged group, launch: completed, no node waited for", byTag(base), hookFacts{kind: event.KindLaunch, attempt: 1, canReadTags: true, tags: carries, ec2: foreign},
			want{verdict: verdictCompleteOnly, tagged: true, why: "; its ASG is tagged node-drainer=on: lifecycle action completed, no node waited for"}},
		{"another cluster's instance, tagged group: left to its deployment", byTag(base), hookFacts{attempt: 1, canReadTags: true, tags: carries, ec2: otherCluster},
			want{verdict: verdictOthers, tagged: true, why: "instance i-1 carries kubernetes.io/cluster/c2: another cluster's, in group workers which carries node-drainer=on here too"}},
		{"another EKS cluster's instance, tagged group: left to its deployment", byTag(base), hookFacts{kind: event.KindLaunch, attempt: 1, canReadTags: true, tags: carries, ec2: otherEKS},
			want{verdict: verdictOthers, tagged: true, why: "carries eks:cluster-name=c2"}},
		{"another cluster's instance, continuation of a tagged group: left to its deployment", byTag(base), hookFacts{attempt: 2, ec2: otherCluster},
			want{verdict: verdictOthers, tagged: true, why: "kubernetes.io/cluster/c2"}},
		{"another cluster's instance, listed group: ours by name, completed", byTag(listed(base)), hookFacts{attempt: 1, ec2: otherCluster},
			want{verdict: verdictCompleteOnly, why: "its ASG is in ASG_NAMES"}},
		{"EKS name of this cluster, no cluster tag, tagged group: completed", byTag(base), hookFacts{attempt: 1, canReadTags: true, tags: carries, ec2: sameEKS},
			want{verdict: verdictCompleteOnly, tagged: true, why: "its ASG is tagged"}},

		// EC2 unreadable
		{"launch, EC2 unreadable: nothing done, the error returned", listed(base), hookFacts{kind: event.KindLaunch, attempt: 1, ec2: unreadable},
			want{verdict: verdictUnreadable, err: errEC2}},
		{"EC2 unreadable, group only allowed: heartbeated for the retry", anyGroup(base), hookFacts{kind: event.KindTerminate, attempt: 1, ec2: unreadable},
			want{verdict: verdictHeartbeatRetry, err: errEC2}},
		{"EC2 unreadable, listed group: drained without EC2's view", listed(base), hookFacts{kind: event.KindTerminate, attempt: 1, ec2: unreadable},
			want{verdict: verdictOursBlind}},
		{"EC2 unreadable, continuation: drained without EC2's view", anyGroup(base), hookFacts{kind: event.KindTerminate, attempt: 2, ec2: unreadable},
			want{verdict: verdictOursBlind}},
		{"EC2 unreadable, taken by the sweep: drained without EC2's view", anyGroup(base), hookFacts{kind: event.KindTerminate, attempt: 1, fromSweep: true, ec2: unreadable},
			want{verdict: verdictOursBlind}},
		{"EC2 unreadable, continuation of a tagged group: drained, no node lookup", byTag(base), hookFacts{kind: event.KindTerminate, attempt: 2, ec2: unreadable},
			want{verdict: verdictOursBlind, tagged: true}},
		{"EC2 unreadable, group ours by its tag alone: its node looked for", byTag(base), hookFacts{kind: event.KindTerminate, attempt: 1, canReadTags: true, tags: carries, ec2: unreadable},
			want{need: needNode, tagged: true}},
		{"EC2 unreadable, tagged group, no node here: heartbeated, left for a retry", byTag(base),
			hookFacts{kind: event.KindTerminate, act: lifecycle.Action{InstanceID: "i-1"}, attempt: 1, canReadTags: true, tags: carries, ec2: unreadable, node: nodeReading{read: true, err: errNoNode}},
			want{verdict: verdictNoNodeRetry, tagged: true, err: errEC2, why: "EC2 unreadable and no node of i-1 in this cluster (node not found): in a group ours by its tag alone it may be another cluster's; left for a retry"}},
		{"EC2 unreadable, tagged group, its node here: drained without EC2's view", byTag(base),
			hookFacts{kind: event.KindTerminate, attempt: 1, canReadTags: true, tags: carries, ec2: unreadable, node: nodeReading{read: true}},
			want{verdict: verdictOursBlind, tagged: true}},
		{"EC2 unreadable, tagged and listed group: drained, no node lookup", byTag(listed(base)), hookFacts{kind: event.KindTerminate, attempt: 1, ec2: unreadable},
			want{verdict: verdictOursBlind}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.act.ASG = group
			if tc.f.act.Hook == "" {
				tc.f.act.Hook = ourHook
			}
			if tc.f.kind == "" {
				tc.f.kind = event.KindTerminate
			}
			got := whoseHook(tc.cfg, tc.f)
			if got.need != tc.want.need || got.verdict != tc.want.verdict || got.tagged != tc.want.tagged {
				t.Errorf("need %d verdict %d tagged %v; want need %d verdict %d tagged %v", got.need, got.verdict, got.tagged, tc.want.need, tc.want.verdict, tc.want.tagged)
			}
			if tc.want.why == "" && got.why != "" || !strings.Contains(got.why, tc.want.why) {
				t.Errorf("why %q; want %q", got.why, tc.want.why)
			}
			if tc.want.err == nil && got.err != nil || !errors.Is(got.err, tc.want.err) {
				t.Errorf("error %v; want %v", got.err, tc.want.err)
			}
		})
	}
}
