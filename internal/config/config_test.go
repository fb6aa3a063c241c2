package config

import (
	"encoding/base64"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// env returns a getenv over the given NAME=value pairs.
func env(pairs ...string) func(string) string {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

var caData = base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"))

func TestFromEnvDefaults(t *testing.T) {
	c, err := FromEnv(env("CLUSTER_NAME=prod", "AWS_LAMBDA_FUNCTION_NAME=node-drainer"))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ClusterName:              "prod",
		ClusterTagKey:            "kubernetes.io/cluster/prod",
		ASGTagValue:              "true",
		CreateTerminateHook:      true,
		HeartbeatTimeout:         360 * time.Second,
		DryRun:                   false,
		DrainTimeout:             30 * time.Minute,
		SpotDrainTimeout:         100 * time.Second,
		SpotGracePeriodCap:       90 * time.Second,
		CriticalPriority:         2000000000,
		RebalanceAction:          ActionCordon,
		ScheduledChangeAction:    ActionDrain,
		ScheduledChangeLeadTime:  15 * time.Minute,
		LifecycleResultOnFailure: "CONTINUE",
		EvictUnmanagedPods:       true,
		PodPolicy:                PodPolicyIgnore,
		VolumeDetachTimeout:      2 * time.Minute,
		StoppingWaitTimeout:      3 * time.Minute,
		OutOfServiceTaint:        true,
		DeleteTerminatedNodes:    false,
		KubeQPS:                  100,
		KubeBurst:                200,
		DeadlineMargin:           20 * time.Second,
		OutcomeBlockedAfter:      5 * time.Minute,
		ContinueLongDrains:       true,
		MaxContinuations:         20,
		TerminateHookName:        "node-drainer-terminate",
		LaunchHookName:           "node-drainer-launch",
		AdvisoryMarkTTL:          time.Hour,
		DeadNodeEvictionWindow:   30 * time.Second,
		NodeLeaseStaleAfter:      15 * time.Second,
		LeaseNamespace:           "node-drainer",
		FunctionName:             "node-drainer",
		ZombieAfter:              10 * time.Minute,
		ZombieAction:             ZombieReport,
		ZombieMaxPerSweep:        1,
		SweepShardNodes:          5000,
		ZombieMaxASGShare:        0.1,
		SkipNodesOwnedBy:         []string{"karpenter", "auto-mode", "managed-nodegroup"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\ngot  %+v\nwant %+v", c, want)
	}
	if c.Mode() != "eks" {
		t.Errorf("mode %q, want eks", c.Mode())
	}
}

// Every documented default must itself be valid: FromEnv with each variable
// set to its documented default equals FromEnv with nothing set.
func TestVarsDefaultsAreValid(t *testing.T) {
	seen := map[string]bool{}
	pairs := []string{"CLUSTER_NAME=prod"}
	for _, v := range Vars {
		if seen[v.Name] {
			t.Errorf("%s listed twice in Vars", v.Name)
		}
		seen[v.Name] = true
		if v.Help == "" {
			t.Errorf("%s has no help", v.Name)
		}
		if v.Default != "" {
			pairs = append(pairs, v.Name+"="+v.Default)
		}
	}
	explicit, err := FromEnv(env(pairs...))
	if err != nil {
		t.Fatal(err)
	}
	implicit, err := FromEnv(env("CLUSTER_NAME=prod"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(explicit, implicit) {
		t.Errorf("documented defaults differ from the applied ones:\n%+v\n%+v", explicit, implicit)
	}
}

func TestFromEnvValues(t *testing.T) {
	c, err := FromEnv(env(
		"CLUSTER_NAME=  prod  ",
		"DRY_RUN=true",
		"DRAIN_TIMEOUT=1h30m",
		"SPOT_DRAIN_TIMEOUT=2m",
		"SPOT_GRACE_PERIOD_CAP=45s",
		"CRITICAL_PRIORITY_THRESHOLD=1000000",
		"REBALANCE_ACTION=DRAIN",
		"SCHEDULED_CHANGE_ACTION=Ignore",
		"LIFECYCLE_RESULT_ON_FAILURE=abandon",
		"EVICT_UNMANAGED_PODS=false",
		"POD_POLICY=Honor",
		"VOLUME_DETACH_TIMEOUT=45s",
		"STOPPING_WAIT_TIMEOUT=10s",
		"OUT_OF_SERVICE_TAINT=0",
		"DELETE_TERMINATED_NODES=1",
		"KUBE_CLIENT_QPS=12.5",
		"KUBE_CLIENT_BURST=7",
		"DEADLINE_MARGIN=30s",
		"CONTINUE_LONG_DRAINS=false",
		"ADVISORY_MARK_TTL=10m",
		"DEAD_NODE_EVICTION_WINDOW=5s",
		"NODE_LEASE_STALE_AFTER=1m",
		"LEASE_NAMESPACE=ops",
		"CLUSTER_TAG_KEY=k8s.io/cluster-autoscaler/prod",
		"SCHEDULED_CHANGE_LEAD_TIME=1h",
		"MAX_CONTINUATIONS=0",
		"HOOK_NAMES= drain-hook , ,other ",
		"ZOMBIE_AFTER=30m",
		"ZOMBIE_ACTION=Replace",
		"ZOMBIE_MAX_PER_SWEEP=3",
		"SWEEP_SHARD_NODES=2000",
		"ZOMBIE_MAX_ASG_SHARE=25%",
		"SKIP_NODES_OWNED_BY=auto-mode",
		"ASG_TAG_KEY=k8s.io/cluster-autoscaler/enabled",
		"ASG_TAG_VALUE=yes please",
		"CREATE_TERMINATE_HOOK=false",
		"CREATE_LAUNCH_HOOK=true",
		"HEARTBEAT_TIMEOUT=900",
		"OUTCOME_EVENT_BUS=on-call",
		"OUTCOME_BLOCKED_AFTER=10m",
	))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ClusterName:              "prod",
		ClusterTagKey:            "k8s.io/cluster-autoscaler/prod",
		ASGTagKey:                "k8s.io/cluster-autoscaler/enabled",
		ASGTagValue:              "yes please",
		CreateLaunchHook:         true,
		HeartbeatTimeout:         15 * time.Minute,
		DryRun:                   true,
		DrainTimeout:             90 * time.Minute,
		SpotDrainTimeout:         2 * time.Minute,
		SpotGracePeriodCap:       45 * time.Second,
		CriticalPriority:         1000000,
		RebalanceAction:          ActionDrain,
		ScheduledChangeAction:    ActionIgnore,
		ScheduledChangeLeadTime:  time.Hour,
		LifecycleResultOnFailure: "ABANDON",
		EvictUnmanagedPods:       false,
		PodPolicy:                PodPolicyHonor,
		VolumeDetachTimeout:      45 * time.Second,
		StoppingWaitTimeout:      10 * time.Second,
		OutOfServiceTaint:        false,
		DeleteTerminatedNodes:    true,
		KubeQPS:                  12.5,
		KubeBurst:                7,
		DeadlineMargin:           30 * time.Second,
		OutcomeEventBus:          "on-call",
		OutcomeBlockedAfter:      10 * time.Minute,
		ContinueLongDrains:       false,
		MaxContinuations:         0,
		TerminateHookName:        "node-drainer-terminate",
		LaunchHookName:           "node-drainer-launch",
		HookNames:                []string{"drain-hook", "other"},
		SkipNodesOwnedBy:         []string{"auto-mode"},
		AdvisoryMarkTTL:          10 * time.Minute,
		DeadNodeEvictionWindow:   5 * time.Second,
		NodeLeaseStaleAfter:      time.Minute,
		LeaseNamespace:           "ops",
		ZombieAfter:              30 * time.Minute,
		ZombieAction:             ZombieReplace,
		ZombieMaxPerSweep:        3,
		SweepShardNodes:          2000,
		ZombieMaxASGShare:        0.25,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want []string // all in the error
		bare bool     // no CLUSTER_NAME=prod added: the case is about the cluster settings
	}{
		{"nothing set", nil, []string{"CLUSTER_NAME is required"}, true},
		{"blank cluster name", []string{"CLUSTER_NAME=   "}, []string{"CLUSTER_NAME is required"}, true},
		{"dry run not a bool", []string{"DRY_RUN=maybe"}, []string{"DRY_RUN", "true or false"}, false},
		{"drain timeout not a duration", []string{"DRAIN_TIMEOUT=30"}, []string{"DRAIN_TIMEOUT", "positive duration"}, false},
		{"drain timeout zero", []string{"DRAIN_TIMEOUT=0s"}, []string{"DRAIN_TIMEOUT"}, false},
		{"drain timeout negative", []string{"DRAIN_TIMEOUT=-5m"}, []string{"DRAIN_TIMEOUT"}, false},
		{"spot drain timeout not a duration", []string{"SPOT_DRAIN_TIMEOUT=soon"}, []string{"SPOT_DRAIN_TIMEOUT"}, false},
		{"spot drain timeout over the notice", []string{"SPOT_DRAIN_TIMEOUT=121s"}, []string{"SPOT_DRAIN_TIMEOUT", "2-minute"}, false},
		{"spot grace cap over the notice", []string{"SPOT_GRACE_PERIOD_CAP=3m"}, []string{"SPOT_GRACE_PERIOD_CAP", "2-minute"}, false},
		{"critical priority not a number", []string{"CRITICAL_PRIORITY_THRESHOLD=high"}, []string{"CRITICAL_PRIORITY_THRESHOLD"}, false},
		{"critical priority beyond 32 bits", []string{"CRITICAL_PRIORITY_THRESHOLD=3000000000"}, []string{"CRITICAL_PRIORITY_THRESHOLD"}, false},
		{"rebalance action", []string{"REBALANCE_ACTION=evict"}, []string{"REBALANCE_ACTION", "ignore, cordon or drain"}, false},
		{"scheduled change action", []string{"SCHEDULED_CHANGE_ACTION=reboot"}, []string{"SCHEDULED_CHANGE_ACTION"}, false},
		{"lifecycle result", []string{"LIFECYCLE_RESULT_ON_FAILURE=RETRY"}, []string{"LIFECYCLE_RESULT_ON_FAILURE", "CONTINUE or ABANDON"}, false},
		{"evict unmanaged", []string{"EVICT_UNMANAGED_PODS=yes"}, []string{"EVICT_UNMANAGED_PODS"}, false},
		{"pod policy unknown", []string{"POD_POLICY=respect"}, []string{"POD_POLICY", "ignore or honor"}, false},
		{"volume detach timeout", []string{"VOLUME_DETACH_TIMEOUT=2"}, []string{"VOLUME_DETACH_TIMEOUT"}, false},
		{"stopping wait timeout", []string{"STOPPING_WAIT_TIMEOUT=-1s"}, []string{"STOPPING_WAIT_TIMEOUT"}, false},
		{"out-of-service taint", []string{"OUT_OF_SERVICE_TAINT=on"}, []string{"OUT_OF_SERVICE_TAINT"}, false},
		{"delete terminated nodes", []string{"DELETE_TERMINATED_NODES=off"}, []string{"DELETE_TERMINATED_NODES"}, false},
		{"deadline margin", []string{"DEADLINE_MARGIN=0"}, []string{"DEADLINE_MARGIN"}, false},
		{"deadline margin under the outcome put's bound", []string{"DEADLINE_MARGIN=2s", "OUTCOME_EVENT_BUS=on-call"}, []string{"DEADLINE_MARGIN", "OUTCOME_EVENT_BUS", "3s"}, false},
		{"lead time", []string{"SCHEDULED_CHANGE_LEAD_TIME=-5m"}, []string{"SCHEDULED_CHANGE_LEAD_TIME"}, false},
		{"max continuations negative", []string{"MAX_CONTINUATIONS=-1"}, []string{"MAX_CONTINUATIONS"}, false},
		{"max continuations not a number", []string{"MAX_CONTINUATIONS=many"}, []string{"MAX_CONTINUATIONS"}, false},
		{"continue long drains", []string{"CONTINUE_LONG_DRAINS=2"}, []string{"CONTINUE_LONG_DRAINS"}, false},
		{"qps not a number", []string{"KUBE_CLIENT_QPS=fast"}, []string{"KUBE_CLIENT_QPS", "positive number"}, false},
		{"qps zero", []string{"KUBE_CLIENT_QPS=0"}, []string{"KUBE_CLIENT_QPS"}, false},
		{"qps negative", []string{"KUBE_CLIENT_QPS=-3"}, []string{"KUBE_CLIENT_QPS"}, false},
		{"qps NaN", []string{"KUBE_CLIENT_QPS=NaN"}, []string{"KUBE_CLIENT_QPS"}, false},
		{"burst not an integer", []string{"KUBE_CLIENT_BURST=1.5"}, []string{"KUBE_CLIENT_BURST", "positive integer"}, false},
		{"burst zero", []string{"KUBE_CLIENT_BURST=0"}, []string{"KUBE_CLIENT_BURST"}, false},
		{"CA not base64", []string{"CLUSTER_NAME=prod", "CLUSTER_ENDPOINT=https://10.0.0.1", "CLUSTER_CA_DATA=%%%"}, []string{"CLUSTER_CA_DATA", "base64"}, true},
		{"endpoint without CA", []string{"CLUSTER_NAME=prod", "CLUSTER_ENDPOINT=https://10.0.0.1"}, []string{"CLUSTER_ENDPOINT and CLUSTER_CA_DATA go together"}, true},
		{"CA without endpoint", []string{"CLUSTER_NAME=prod", "CLUSTER_CA_DATA=" + caData}, []string{"CLUSTER_ENDPOINT and CLUSTER_CA_DATA go together"}, true},
		{"two kubeconfigs", []string{"KUBECONFIG_PATH=/k", "KUBECONFIG_SECRET_ID=s"}, []string{"at most one of KUBECONFIG_PATH"}, true},
		{"three kubeconfigs", []string{"KUBECONFIG_PATH=/k", "KUBECONFIG_SSM_PARAMETER=/p", "KUBECONFIG_SECRET_ID=s"}, []string{"at most one"}, true},
		{"kubeconfig without cluster name or tag", []string{"KUBECONFIG_PATH=/k"}, []string{"CLUSTER_TAG_KEY is required"}, true},
		{"unknown lifecycle owner", []string{"SKIP_NODES_OWNED_BY=karpenter,nth"}, []string{"SKIP_NODES_OWNED_BY", `"nth"`, "or none"}, false},
		{"group tag key with a quote", []string{`ASG_TAG_KEY=node-drainer"x`}, []string{"ASG_TAG_KEY", "letters, digits"}, false},
		{"group tag key too long", []string{"ASG_TAG_KEY=" + strings.Repeat("k", 129)}, []string{"ASG_TAG_KEY", "128"}, false},
		{"group tag value with a brace", []string{"ASG_TAG_KEY=node-drainer.io/enabled", "ASG_TAG_VALUE={x}"}, []string{"ASG_TAG_VALUE"}, false},
		{"create terminate hook", []string{"CREATE_TERMINATE_HOOK=yes"}, []string{"CREATE_TERMINATE_HOOK"}, false},
		{"create launch hook", []string{"CREATE_LAUNCH_HOOK=1x"}, []string{"CREATE_LAUNCH_HOOK"}, false},
		{"heartbeat timeout below the retry", []string{"HEARTBEAT_TIMEOUT=60"}, []string{"HEARTBEAT_TIMEOUT", "300 to 7200"}, false},
		{"heartbeat timeout a duration", []string{"HEARTBEAT_TIMEOUT=5m"}, []string{"HEARTBEAT_TIMEOUT"}, false},
		{"every problem reported at once", []string{"DRY_RUN=x", "DRAIN_TIMEOUT=x", "KUBE_CLIENT_BURST=x"}, []string{"DRY_RUN", "DRAIN_TIMEOUT", "KUBE_CLIENT_BURST", "CLUSTER_NAME is required"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pairs := tc.env
			if !tc.bare {
				pairs = append([]string{"CLUSTER_NAME=prod"}, pairs...)
			}
			c, err := FromEnv(env(pairs...))
			if err == nil {
				t.Fatalf("want an error, got %+v", c)
			}
			if !strings.HasPrefix(err.Error(), "invalid configuration: ") {
				t.Errorf("error %q does not say the configuration is invalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !reflect.DeepEqual(c, Config{}) {
				t.Errorf("want the zero Config with an error, got %+v", c)
			}
		})
	}
}

// Without outcome events a short margin is the operator's to choose.
func TestDeadlineMarginWithoutOutcomes(t *testing.T) {
	for _, pairs := range [][]string{{"DEADLINE_MARGIN=2s"}, {"DEADLINE_MARGIN=3s", "OUTCOME_EVENT_BUS=on-call"}} {
		if _, err := FromEnv(env(append([]string{"CLUSTER_NAME=prod"}, pairs...)...)); err != nil {
			t.Errorf("%v: %v", pairs, err)
		}
	}
}

func TestFromEnvSpotDrainTimeoutBoundary(t *testing.T) {
	c, err := FromEnv(env("CLUSTER_NAME=prod", "SPOT_DRAIN_TIMEOUT=120s"))
	if err != nil || c.SpotDrainTimeout != 2*time.Minute {
		t.Errorf("120s fits the notice: got %v, %v", c.SpotDrainTimeout, err)
	}
}

func TestASGNames(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    []string
		allowed []string
		denied  []string
	}{
		{"", nil, []string{"any", "eks-general"}, nil},
		{"   ", nil, []string{"any"}, nil},
		{",, ,", nil, []string{"any"}, nil},
		{"eks-general", []string{"eks-general"}, []string{"eks-general"}, []string{"eks-general-2", "EKS-GENERAL", "other"}},
		{" a , b,,c ,", []string{"a", "b", "c"}, []string{"a", "b", "c"}, []string{"", " a ", "ab", "d"}},
	} {
		t.Run(tc.value, func(t *testing.T) {
			c, err := FromEnv(env("CLUSTER_NAME=prod", "ASG_NAMES="+tc.value))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.ASGNames, tc.want) {
				t.Errorf("ASGNames %q, want %q", c.ASGNames, tc.want)
			}
			for _, n := range tc.allowed {
				if !c.AllowsASG(n) {
					t.Errorf("AllowsASG(%q) = false, want true", n)
				}
			}
			for _, n := range tc.denied {
				if c.AllowsASG(n) {
					t.Errorf("AllowsASG(%q) = true, want false", n)
				}
			}
		})
	}
}

func TestHookNamesAndListedASGs(t *testing.T) {
	defaults, err := FromEnv(env("CLUSTER_NAME=prod"))
	if err != nil {
		t.Fatal(err)
	}
	// the defaults own the templates' two hooks and nothing else: another
	// tool's hook is never ours, whatever HOOK_NAMES says (rule 14)
	for name, want := range map[string]bool{"node-drainer-terminate": true, "node-drainer-launch": true, "flush-logs": false, "app-warmup": false, "": false} {
		if got := defaults.OwnsHook(name); got != want {
			t.Errorf("defaults: OwnsHook(%q) = %v, want %v", name, got, want)
		}
	}
	if defaults.ListsASG("eks-general") {
		t.Errorf("defaults: ListsASG = true, want false: an empty list names nothing")
	}
	c, err := FromEnv(env("CLUSTER_NAME=prod", "TERMINATE_HOOK_NAME=drain", "HOOK_NAMES=ops-terminate, ops-launch", "ASG_NAMES=eks-general"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"drain": true, "node-drainer-launch": true, "ops-terminate": true, "ops-launch": true,
		"node-drainer-terminate": false, "other-teams-hook": false, "": false} {
		if got := c.OwnsHook(name); got != want {
			t.Errorf("OwnsHook(%q) = %v, want %v", name, got, want)
		}
	}
	if got := c.OwnedHooks(); !slices.Equal(got, []string{"drain", "node-drainer-launch", "ops-launch", "ops-terminate"}) {
		t.Errorf("OwnedHooks = %v", got)
	}

	if !c.ListsASG("eks-general") || c.ListsASG("eks-other") {
		t.Errorf("ListsASG(eks-general) = %v, ListsASG(eks-other) = %v: want true, false", c.ListsASG("eks-general"), c.ListsASG("eks-other"))
	}
}

func TestSkipNodesOwnedBy(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []string
	}{
		{"", []string{"karpenter", "auto-mode", "managed-nodegroup"}}, // the default
		{"none", nil},
		{" karpenter , auto-mode ", []string{"karpenter", "auto-mode"}},
		{"managed-nodegroup", []string{"managed-nodegroup"}},
	} {
		t.Run(tc.value, func(t *testing.T) {
			c, err := FromEnv(env("CLUSTER_NAME=prod", "SKIP_NODES_OWNED_BY="+tc.value))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.SkipNodesOwnedBy, tc.want) {
				t.Errorf("SkipNodesOwnedBy = %q, want %q", c.SkipNodesOwnedBy, tc.want)
			}
			for _, o := range LifecycleOwners {
				if got, want := c.SkipsOwner(o), slices.Contains(tc.want, o); got != want {
					t.Errorf("SkipsOwner(%s) = %v, want %v", o, got, want)
				}
			}
		})
	}
}

func TestMode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		mode    string
		tagKey  string
		caBytes bool
	}{
		{"eks", []string{"CLUSTER_NAME=prod"}, "eks", "kubernetes.io/cluster/prod", false},
		{"self-managed", []string{"CLUSTER_NAME=kubeadm", "CLUSTER_ENDPOINT=https://10.0.0.1:6443", "CLUSTER_CA_DATA=" + caData}, "self-managed", "kubernetes.io/cluster/kubeadm", true},
		{"kubeconfig file", []string{"KUBECONFIG_PATH=/var/task/kubeconfig", "CLUSTER_TAG_KEY=kubernetes.io/cluster/local"}, "kubeconfig", "kubernetes.io/cluster/local", false},
		{"kubeconfig in SSM", []string{"KUBECONFIG_SSM_PARAMETER=/node-drainer/kubeconfig", "CLUSTER_NAME=prod"}, "kubeconfig", "kubernetes.io/cluster/prod", false},
		{"kubeconfig in Secrets Manager", []string{"KUBECONFIG_SECRET_ID=node-drainer", "CLUSTER_NAME=prod"}, "kubeconfig", "kubernetes.io/cluster/prod", false},
		{"kubeconfig wins over an endpoint", []string{"KUBECONFIG_PATH=/k", "CLUSTER_NAME=prod", "CLUSTER_ENDPOINT=https://10.0.0.1", "CLUSTER_CA_DATA=" + caData}, "kubeconfig", "kubernetes.io/cluster/prod", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromEnv(env(tc.env...))
			if err != nil {
				t.Fatal(err)
			}
			if c.Mode() != tc.mode {
				t.Errorf("Mode() = %q, want %q", c.Mode(), tc.mode)
			}
			if c.ClusterTagKey != tc.tagKey {
				t.Errorf("ClusterTagKey %q, want %q", c.ClusterTagKey, tc.tagKey)
			}
			if tc.caBytes {
				want, _ := base64.StdEncoding.DecodeString(caData)
				if string(c.ClusterCAData) != string(want) {
					t.Errorf("ClusterCAData %q, want the decoded PEM", c.ClusterCAData)
				}
			}
		})
	}
}

// With a selecting tag, an unlisted group is not allowed by configuration
// alone (its tag must be read); with neither a list nor a tag, any is.
func TestAllowsASGWithTag(t *testing.T) {
	for _, tc := range []struct {
		env          []string
		listed, any  bool
		selectsByTag bool
	}{
		{[]string{"CLUSTER_NAME=prod"}, false, true, false},
		{[]string{"CLUSTER_NAME=prod", "ASG_TAG_KEY=node-drainer.io/enabled"}, false, false, true},
		{[]string{"CLUSTER_NAME=prod", "ASG_TAG_KEY=node-drainer.io/enabled", "ASG_NAMES=a"}, true, false, true},
		{[]string{"CLUSTER_NAME=prod", "ASG_NAMES=a"}, true, false, false},
	} {
		c, err := FromEnv(env(tc.env...))
		if err != nil {
			t.Fatal(err)
		}
		if c.AllowsASG("a") != (tc.listed || tc.any) || c.AllowsASG("b") != tc.any || c.SelectsByTag() != tc.selectsByTag {
			t.Errorf("%v: AllowsASG(a)=%v AllowsASG(b)=%v SelectsByTag=%v; want %v %v %v", tc.env,
				c.AllowsASG("a"), c.AllowsASG("b"), c.SelectsByTag(), tc.listed || tc.any, tc.any, tc.selectsByTag)
		}
	}
}
