// Package config turns the function's environment into a validated Config.
// Every variable, its default and its meaning is listed in Vars, which the
// configuration table of docs/configuration.md and the deploy templates follow.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/node-drainer/node-drainer/internal/logging"
	"github.com/node-drainer/node-drainer/internal/outcome"
)

// Action is what to do with a node on an advisory event.
type Action string

// The advisory actions.
const (
	ActionIgnore Action = "ignore" // log only
	ActionCordon Action = "cordon" // mark unschedulable, leave pods
	ActionDrain  Action = "drain"  // cordon and evict
)

// Config is the function's configuration.
type Config struct {
	ClusterName string // EKS cluster name, or the cluster id of a self-managed cluster's authenticator

	// Self-managed clusters: the endpoint and CA, skipping eks:DescribeCluster.
	ClusterEndpoint string
	ClusterCAData   []byte
	// Kubeconfig mode: one of these names a kubeconfig to use instead.
	KubeconfigPath         string
	KubeconfigSSMParameter string
	KubeconfigSecretID     string

	ASGNames      []string // lifecycle hooks of other ASGs are ignored (empty, and no ASGTagKey: any ASG)
	ClusterTagKey string   // instances without this tag are ignored
	// ASGTagKey and ASGTagValue select node groups by tag (empty key: by
	// ASG_NAMES alone): a group carrying the tag is the function's as if it
	// were listed — its hooks are put on it (EnsureHooks) and its lifecycle
	// actions handled, the tag read again at the moment of acting.
	ASGTagKey, ASGTagValue string
	// The hooks the function puts on tagged groups, as the templates put
	// them on listed ones: which, and their heartbeat timeout.
	CreateTerminateHook, CreateLaunchHook bool
	HeartbeatTimeout                      time.Duration

	DryRun                   bool
	DrainTimeout             time.Duration // overall, across continuations
	SpotDrainTimeout         time.Duration // must fit the 2-minute notice
	SpotGracePeriodCap       time.Duration // longest grace period an evicted pod gets on a spot warning
	CriticalPriority         int32         // pods at or above it are drained last
	RebalanceAction          Action
	ScheduledChangeAction    Action
	ScheduledChangeLeadTime  time.Duration // act on a scheduled change this long before it starts
	LifecycleResultOnFailure string        // CONTINUE or ABANDON
	EvictUnmanagedPods       bool
	PodPolicy                PodPolicy // podpolicy.go
	VolumeDetachTimeout      time.Duration
	StoppingWaitTimeout      time.Duration
	OutOfServiceTaint        bool
	DeleteTerminatedNodes    bool
	KubeQPS                  float32
	KubeBurst                int
	DeadlineMargin           time.Duration // kept back from the deadline to complete the hook
	// OutcomeEventBus: the EventBridge bus outcome events are put on
	// (empty: none); OutcomeBlockedAfter: a drain not finished after it is
	// told of once.
	OutcomeEventBus        string
	OutcomeBlockedAfter    time.Duration
	ContinueLongDrains     bool
	MaxContinuations       int           // continuations of one drain at most (0: none)
	TerminateHookName      string        // the terminate hook the templates create: ours
	LaunchHookName         string        // the launch hook the templates create: ours
	HookNames              []string      // more lifecycle hooks that are ours (hooks the operator made for us)
	AdvisoryMarkTTL        time.Duration // an advisory cause lapses when the instance still runs after it
	DeadNodeEvictionWindow time.Duration // a terminate drain of a NotReady node waits this long for its pods
	NodeLeaseStaleAfter    time.Duration // a node whose Lease is older counts as not running a kubelet
	LeaseNamespace         string        // where the per-instance leases live
	FunctionName           string        // set by Lambda; the target of continuations
	LogLevel               slog.Level    // the least severe level logged (internal/logging)

	// The sweep's handling of nodes NotReady on a running instance.
	ZombieAfter       time.Duration
	ZombieAction      ZombieAction
	ZombieMaxPerSweep int
	ZombieMaxASGShare float64 // 0–1

	// SweepShardNodes is how many Nodes one sweep invocation reads and acts
	// on; a cluster with more splits its pass across invocations (0: never).
	SweepShardNodes int

	// SkipNodesOwnedBy names the lifecycle owners (LifecycleOwners) whose
	// nodes are left to them (empty: none).
	SkipNodesOwnedBy []string

	Policy // per node group (GROUP_POLICY_TAGS), and LB_DRAIN_WAIT: policy.go
	Batch  // BATCH_CORDON, NODE_CONDITIONS (batch.go)
}

// ZombieAction is what the sweep does with a zombie node.
type ZombieAction string

// The zombie actions.
const (
	ZombieReport  ZombieAction = "report"  // an Event on the Node and a log line
	ZombieReplace ZombieAction = "replace" // also SetInstanceHealth Unhealthy, so its ASG replaces it
)

// LifecycleOwners are the other lifecycle owners SKIP_NODES_OWNED_BY may
// name (internal/node tells them by their labels).
var LifecycleOwners = []string{"karpenter", "auto-mode", "managed-nodegroup"}

// Var documents one environment variable.
type Var struct {
	Name, Default, Help string
}

// Vars lists every variable the function reads (besides the AWS SDK's own,
// such as AWS_REGION and AWS_ENDPOINT_URL_<SERVICE>).
var Vars = []Var{
	{"CLUSTER_NAME", "", "EKS cluster name (or the cluster id of a self-managed cluster's aws-iam-authenticator). Required unless a kubeconfig is given."},
	{"CLUSTER_ENDPOINT", "", "Self-managed clusters: API server URL; skips eks:DescribeCluster."},
	{"CLUSTER_CA_DATA", "", "Self-managed clusters: base64 PEM of the API server's CA (with CLUSTER_ENDPOINT)."},
	{"KUBECONFIG_PATH", "", "Kubeconfig file to use instead of an STS token (local runs)."},
	{"KUBECONFIG_SSM_PARAMETER", "", "SSM parameter (SecureString) holding a kubeconfig."},
	{"KUBECONFIG_SECRET_ID", "", "Secrets Manager secret holding a kubeconfig."},
	{"ASG_NAMES", "", "Comma-separated Auto Scaling groups whose hooks are handled; empty: any."},
	{"CLUSTER_TAG_KEY", "", "EC2 tag that marks this cluster's instances; empty: kubernetes.io/cluster/<CLUSTER_NAME>."},
	{"ASG_TAG_KEY", "", "Tag key that selects Auto Scaling groups besides ASG_NAMES (the templates' default: node-drainer.io/enabled): the function puts its lifecycle hooks on every group carrying ASG_TAG_KEY=ASG_TAG_VALUE (at each sweep) and handles their lifecycle actions, reading the tag again before it acts; empty: ASG_NAMES alone."},
	{"ASG_TAG_VALUE", "true", "Value ASG_TAG_KEY must have."},
	{"CREATE_TERMINATE_HOOK", "true", "Put the terminate hook (TERMINATE_HOOK_NAME) on tagged groups that lack it."},
	{"CREATE_LAUNCH_HOOK", "false", "Put the launch hook (LAUNCH_HOOK_NAME) on tagged groups that lack it."},
	{"HEARTBEAT_TIMEOUT", "360", "Heartbeat timeout in seconds of the hooks put on tagged groups (300 to 7200, and at least the sweep's period and a minute), as the templates create them; their default result is CONTINUE."},
	{"DRY_RUN", "false", "Log and return the plan; write nothing to the cluster; complete hooks with `CONTINUE` at once."},
	{"DRAIN_TIMEOUT", "30m", "Longest a drain may take, across continuations; then the hook is completed with LIFECYCLE_RESULT_ON_FAILURE."},
	{"SPOT_DRAIN_TIMEOUT", "100s", "Longest drain on a spot interruption warning, or an interruptible Capacity Reservation's (2 minutes' notice)."},
	{"SPOT_GRACE_PERIOD_CAP", "90s", "On a spot or capacity reservation interruption warning, the longest grace period an evicted pod gets (its own when shorter); each drain tier also gets at most its share of the time left."},
	{"CRITICAL_PRIORITY_THRESHOLD", "2000000000", "Pods at or above this priority (and those of system-node-critical or system-cluster-critical) are drained last."},
	{"REBALANCE_ACTION", "cordon", "On a rebalance recommendation: ignore, cordon or drain."},
	{"SCHEDULED_CHANGE_ACTION", "drain", "On an AWS Health scheduled change: ignore, cordon or drain."},
	{"SCHEDULED_CHANGE_LEAD_TIME", "15m", "How long before a scheduled change starts it is acted on; before that, cordon or drain only cordons."},
	{"LIFECYCLE_RESULT_ON_FAILURE", "CONTINUE", "Lifecycle action result when the drain fails or times out: CONTINUE or ABANDON."},
	{"EVICT_UNMANAGED_PODS", "true", "Evict pods that no controller owns (they are not recreated)."},
	{"VOLUME_DETACH_TIMEOUT", "2m", "How long to wait for the drained pods' VolumeAttachments to be deleted."},
	{"STOPPING_WAIT_TIMEOUT", "3m", "How long to wait for a stopping/shutting-down instance to be stopped/terminated before forcing anything."},
	{"OUT_OF_SERVICE_TAINT", "true", "Taint a node confirmed down with node.kubernetes.io/out-of-service."},
	{"DELETE_TERMINATED_NODES", "false", "Delete the Node of a terminated instance (clusters without a cloud controller); needs rbac-delete-nodes.yaml, which grants nodes: delete only then."},
	{"KUBE_CLIENT_QPS", "100", "Kubernetes client queries per second."},
	{"KUBE_CLIENT_BURST", "200", "Kubernetes client burst."},
	{"DEADLINE_MARGIN", "20s", "Time kept back from the Lambda deadline to complete the hook or continue; at least 3s when OUTCOME_EVENT_BUS is set."},
	{"CONTINUE_LONG_DRAINS", "true", "Re-invoke the function asynchronously to continue a drain that outlasts one invocation."},
	{"MAX_CONTINUATIONS", "20", "Most continuations of one drain; a continuation beyond it is refused (0: none)."},
	{"TERMINATE_HOOK_NAME", "node-drainer-terminate", "Name of the terminate lifecycle hook the templates create (or that you create for node-drainer): the function completes it."},
	{"LAUNCH_HOOK_NAME", "node-drainer-launch", "Name of the launch lifecycle hook the templates create (or that you create for node-drainer): the function completes it."},
	{"HOOK_NAMES", "", "Comma-separated names of more lifecycle hooks that are node-drainer's to complete. Only hooks named here or by TERMINATE_HOOK_NAME and LAUNCH_HOOK_NAME are ever completed, on every path and by the sweep: another tool's hook on the same group is left alone."},
	{"DEAD_NODE_EVICTION_WINDOW", "30s", "A terminate hook on a NotReady node (dead kubelet): evict its pods, wait at most this long for them, then complete the hook; the volumes are released when EC2 reports the instance down."},
	{"NODE_LEASE_STALE_AFTER", "15s", "The abrupt path forces nothing while the node is Ready and its kubelet renewed its Lease within this time (kubelets renew every 10 s)."},
	{"LEASE_NAMESPACE", "node-drainer", "Namespace of the per-instance Leases that keep duplicate events from draining twice: create it and apply rbac-lease-namespace.yaml into it (terraform's manage_rbac does both)."},
	{"ZOMBIE_AFTER", "10m", "The sweep reports a Node NotReady for this long while EC2 says its instance runs (a zombie)."},
	{"ZOMBIE_ACTION", "report", "What the sweep does with a zombie: report (an Event on the Node, a log line) or replace (also SetInstanceHealth Unhealthy, so its ASG replaces it through the terminate hook)."},
	{"ZOMBIE_MAX_PER_SWEEP", "1", "Most zombie instances one sweep marks Unhealthy."},
	{"SWEEP_SHARD_NODES", "5000", "Most Nodes one sweep invocation reads and acts on: a cluster with more splits each pass across concurrent invocations of the function (self-invoked, asynchronously), one per this many Nodes, with one pass id in their summaries; 0: one invocation whatever the size."},
	{"ZOMBIE_MAX_ASG_SHARE", "10", "Most instances of one ASG leaving at once (unhealthy or not in service), in percent of its instances, when the sweep marks a zombie Unhealthy (at least one)."},
	{"SKIP_NODES_OWNED_BY", "karpenter,auto-mode,managed-nodegroup", "Comma-separated lifecycle owners whose nodes are left alone (their hooks completed with `CONTINUE`): `karpenter`, `auto-mode`, `managed-nodegroup`; `none`: act on every node."},
	{"LOG_LEVEL", "INFO", "Least severe level of the function's log lines: DEBUG, INFO, WARN or ERROR. The function applies it itself; the templates keep Lambda's application log filter at TRACE, so the metrics lines (which have no level) are kept at every level."},
	{"OUTCOME_EVENT_BUS", "", "EventBridge bus (name or ARN) the function puts one event per outcome worth a person's attention on (a drain ended, failed or blocked, a forced release, a completed lifecycle action); empty: none."},
	{"OUTCOME_BLOCKED_AFTER", "5m", "A drain not finished after this long is told of once, as a Node Drain Blocked event on OUTCOME_EVENT_BUS, by the invocation that passes it."},
	{"ADVISORY_MARK_TTL", "1h", "How long the marks of a spot warning or rebalance recommendation hold when the instance keeps running; then the next event or sweep lifts them."},
}

// readSweep reads the sweep's own settings: what it does with a zombie,
// how many at most, and its shards.
func (c *Config) readSweep(get func(string) string) []error {
	var errs []error
	switch z := ZombieAction(strings.ToLower(get("ZOMBIE_ACTION"))); z {
	case ZombieReport, ZombieReplace:
		c.ZombieAction = z
	default:
		errs = append(errs, fmt.Errorf("ZOMBIE_ACTION=%q: want report or replace", get("ZOMBIE_ACTION")))
	}
	var err error
	if c.ZombieMaxPerSweep, err = strconv.Atoi(get("ZOMBIE_MAX_PER_SWEEP")); err != nil || c.ZombieMaxPerSweep < 0 {
		errs = append(errs, fmt.Errorf("ZOMBIE_MAX_PER_SWEEP=%q: want an integer >= 0", get("ZOMBIE_MAX_PER_SWEEP")))
	}
	if c.SweepShardNodes, err = strconv.Atoi(get("SWEEP_SHARD_NODES")); err != nil || c.SweepShardNodes < 0 {
		errs = append(errs, fmt.Errorf("SWEEP_SHARD_NODES=%q: want an integer >= 0", get("SWEEP_SHARD_NODES")))
	}
	share, err := strconv.ParseFloat(strings.TrimSuffix(get("ZOMBIE_MAX_ASG_SHARE"), "%"), 64)
	if err != nil || !(share > 0 && share <= 100) {
		errs = append(errs, fmt.Errorf("ZOMBIE_MAX_ASG_SHARE=%q: want a percentage in (0, 100]", get("ZOMBIE_MAX_ASG_SHARE")))
	}
	c.ZombieMaxASGShare = share / 100
	return errs
}

// FromEnv reads and validates the configuration; getenv is os.Getenv in the
// function and a map lookup in tests.
func FromEnv(getenv func(string) string) (Config, error) {
	e := &envReader{getenv: getenv}
	c := Config{
		ClusterName:             e.get("CLUSTER_NAME"),
		ClusterEndpoint:         e.get("CLUSTER_ENDPOINT"),
		KubeconfigPath:          e.get("KUBECONFIG_PATH"),
		KubeconfigSSMParameter:  e.get("KUBECONFIG_SSM_PARAMETER"),
		KubeconfigSecretID:      e.get("KUBECONFIG_SECRET_ID"),
		ClusterTagKey:           e.get("CLUSTER_TAG_KEY"),
		DryRun:                  e.boolean("DRY_RUN"),
		DrainTimeout:            e.duration("DRAIN_TIMEOUT"),
		SpotDrainTimeout:        e.duration("SPOT_DRAIN_TIMEOUT"),
		SpotGracePeriodCap:      e.duration("SPOT_GRACE_PERIOD_CAP"),
		RebalanceAction:         e.action("REBALANCE_ACTION"),
		ScheduledChangeAction:   e.action("SCHEDULED_CHANGE_ACTION"),
		ScheduledChangeLeadTime: e.duration("SCHEDULED_CHANGE_LEAD_TIME"),
		EvictUnmanagedPods:      e.boolean("EVICT_UNMANAGED_PODS"),
		VolumeDetachTimeout:     e.duration("VOLUME_DETACH_TIMEOUT"),
		StoppingWaitTimeout:     e.duration("STOPPING_WAIT_TIMEOUT"),
		OutOfServiceTaint:       e.boolean("OUT_OF_SERVICE_TAINT"),
		DeleteTerminatedNodes:   e.boolean("DELETE_TERMINATED_NODES"),
		DeadlineMargin:          e.duration("DEADLINE_MARGIN"),
		OutcomeEventBus:         e.get("OUTCOME_EVENT_BUS"),
		OutcomeBlockedAfter:     e.duration("OUTCOME_BLOCKED_AFTER"),
		ContinueLongDrains:      e.boolean("CONTINUE_LONG_DRAINS"),
		AdvisoryMarkTTL:         e.duration("ADVISORY_MARK_TTL"),
		DeadNodeEvictionWindow:  e.duration("DEAD_NODE_EVICTION_WINDOW"),
		NodeLeaseStaleAfter:     e.duration("NODE_LEASE_STALE_AFTER"),
		LeaseNamespace:          e.get("LEASE_NAMESPACE"),
		FunctionName:            getenv("AWS_LAMBDA_FUNCTION_NAME"),
	}
	var err error
	if c.LogLevel, err = logging.ParseLevel(e.get("LOG_LEVEL")); err != nil {
		e.fail(fmt.Errorf("LOG_LEVEL: %w", err))
	}
	c.ZombieAfter = e.duration("ZOMBIE_AFTER")
	e.errs = append(e.errs, c.readSweep(e.get)...)
	e.readGroups(&c)
	e.readPodPolicy(&c)
	e.readLimits(&c)
	e.readCluster(&c)
	e.readPolicy(&c)
	e.readBatch(&c)
	e.checkOutcomeMargin(c)
	if err := errors.Join(e.errs...); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, nil
}

// checkOutcomeMargin refuses a DEADLINE_MARGIN shorter than one outcome
// put's bound when outcome events are on: the completion at the deadline
// and the hand-over put their events within the margin, and a shorter one
// skips them (counted, never sent).
func (e *envReader) checkOutcomeMargin(c Config) {
	if c.OutcomeEventBus != "" && c.DeadlineMargin > 0 && c.DeadlineMargin < outcome.DefaultTimeout {
		e.fail(fmt.Errorf("DEADLINE_MARGIN=%s with OUTCOME_EVENT_BUS set: want at least %s, the bound of one outcome put, or the events of a completion at the deadline and of a hand-over are skipped", c.DeadlineMargin, outcome.DefaultTimeout))
	}
}

// envReader reads the variables of Vars (a variable unset or blank is its
// default) and gathers what is wrong with them, to be said at once.
type envReader struct {
	getenv func(string) string
	errs   []error
}

func (e *envReader) fail(err error) { e.errs = append(e.errs, err) }

func (e *envReader) get(name string) string {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		return v
	}
	for _, v := range Vars {
		if v.Name == name {
			return v.Default
		}
	}
	return ""
}

func (e *envReader) duration(name string) time.Duration {
	d, err := time.ParseDuration(e.get(name))
	if err != nil || d <= 0 {
		e.fail(fmt.Errorf("%s=%q: want a positive duration such as 90s or 5m", name, e.get(name)))
	}
	return d
}

func (e *envReader) boolean(name string) bool {
	b, err := strconv.ParseBool(e.get(name))
	if err != nil {
		e.fail(fmt.Errorf("%s=%q: want true or false", name, e.get(name)))
	}
	return b
}

func (e *envReader) action(name string) Action {
	a := Action(strings.ToLower(e.get(name)))
	switch a {
	case ActionIgnore, ActionCordon, ActionDrain:
		return a
	}
	e.fail(fmt.Errorf("%s=%q: want ignore, cordon or drain", name, e.get(name)))
	return ""
}

// readGroups reads which groups and hooks are the deployment's, and whose
// nodes it leaves alone.
func (e *envReader) readGroups(c *Config) {
	c.ASGNames = list(e.get("ASG_NAMES"))
	c.ASGTagKey, c.ASGTagValue = e.get("ASG_TAG_KEY"), e.get("ASG_TAG_VALUE")
	if c.ASGTagKey != "" {
		if err := validTag(c.ASGTagKey, c.ASGTagValue); err != nil {
			e.fail(err)
		}
	}
	c.CreateTerminateHook, c.CreateLaunchHook = e.boolean("CREATE_TERMINATE_HOOK"), e.boolean("CREATE_LAUNCH_HOOK")
	// 300 at least: two failed invocations in a row (Lambda's retries come
	// 1 and 2 minutes apart), the second's heartbeat refused too, leave the
	// hook to its timeout (rule 3; the simulation's I3, seed 1574)
	if hb, err := strconv.Atoi(e.get("HEARTBEAT_TIMEOUT")); err != nil || hb < 300 || hb > 7200 {
		e.fail(fmt.Errorf("HEARTBEAT_TIMEOUT=%q: want seconds from 300 to 7200", e.get("HEARTBEAT_TIMEOUT")))
	} else {
		c.HeartbeatTimeout = time.Duration(hb) * time.Second
	}
	c.HookNames = list(e.get("HOOK_NAMES"))
	c.TerminateHookName, c.LaunchHookName = e.get("TERMINATE_HOOK_NAME"), e.get("LAUNCH_HOOK_NAME")
	if owners := list(e.get("SKIP_NODES_OWNED_BY")); !slices.Equal(owners, []string{"none"}) {
		for _, o := range owners {
			if !slices.Contains(LifecycleOwners, o) {
				e.fail(fmt.Errorf("SKIP_NODES_OWNED_BY: unknown owner %q: want a comma list of %s, or none", o, strings.Join(LifecycleOwners, ", ")))
			}
		}
		c.SkipNodesOwnedBy = owners
	}
}

// readLimits reads the numbers: the critical priority, the continuations,
// the CA, the failure result and the client's rate.
func (e *envReader) readLimits(c *Config) {
	crit, err := strconv.ParseInt(e.get("CRITICAL_PRIORITY_THRESHOLD"), 10, 32)
	if c.CriticalPriority = int32(crit); err != nil || crit <= 0 {
		e.fail(fmt.Errorf("CRITICAL_PRIORITY_THRESHOLD=%q: want a positive 32-bit integer (system-cluster-critical is 2000000000)", e.get("CRITICAL_PRIORITY_THRESHOLD")))
	}
	maxCont, err := strconv.Atoi(e.get("MAX_CONTINUATIONS"))
	if c.MaxContinuations = maxCont; err != nil || maxCont < 0 {
		e.fail(fmt.Errorf("MAX_CONTINUATIONS=%q: want an integer >= 0", e.get("MAX_CONTINUATIONS")))
	}
	if ca := e.get("CLUSTER_CA_DATA"); ca != "" {
		b, err := base64.StdEncoding.DecodeString(ca)
		if err != nil {
			e.fail(fmt.Errorf("CLUSTER_CA_DATA: not base64: %w", err))
		}
		c.ClusterCAData = b
	}
	switch r := strings.ToUpper(e.get("LIFECYCLE_RESULT_ON_FAILURE")); r {
	case "CONTINUE", "ABANDON":
		c.LifecycleResultOnFailure = r
	default:
		e.fail(fmt.Errorf("LIFECYCLE_RESULT_ON_FAILURE=%q: want CONTINUE or ABANDON", r))
	}
	qps, err := strconv.ParseFloat(e.get("KUBE_CLIENT_QPS"), 32)
	if err != nil || !(qps > 0) || math.IsInf(qps, 0) { // also NaN: it would turn rate limiting off
		e.fail(fmt.Errorf("KUBE_CLIENT_QPS=%q: want a positive number", e.get("KUBE_CLIENT_QPS")))
	}
	c.KubeQPS = float32(qps)
	if c.KubeBurst, err = strconv.Atoi(e.get("KUBE_CLIENT_BURST")); err != nil || c.KubeBurst <= 0 {
		e.fail(fmt.Errorf("KUBE_CLIENT_BURST=%q: want a positive integer", e.get("KUBE_CLIENT_BURST")))
	}
}

// readCluster checks how the cluster is reached (one kubeconfig at most,
// or the cluster's name; an endpoint with its CA), defaults its tag key,
// and holds the spot settings to the 2-minute notice.
func (e *envReader) readCluster(c *Config) {
	kubeconfigs := 0
	for _, v := range []string{c.KubeconfigPath, c.KubeconfigSSMParameter, c.KubeconfigSecretID} {
		if v != "" {
			kubeconfigs++
		}
	}
	switch {
	case kubeconfigs > 1:
		e.fail(errors.New("set at most one of KUBECONFIG_PATH, KUBECONFIG_SSM_PARAMETER, KUBECONFIG_SECRET_ID"))
	case kubeconfigs == 0 && c.ClusterName == "":
		e.fail(errors.New("CLUSTER_NAME is required (or a kubeconfig)"))
	case (c.ClusterEndpoint == "") != (len(c.ClusterCAData) == 0):
		e.fail(errors.New("CLUSTER_ENDPOINT and CLUSTER_CA_DATA go together"))
	}
	if c.ClusterTagKey == "" && c.ClusterName != "" {
		c.ClusterTagKey = "kubernetes.io/cluster/" + c.ClusterName
	}
	if c.ClusterTagKey == "" {
		e.fail(errors.New("CLUSTER_TAG_KEY is required when CLUSTER_NAME is not set"))
	}
	if c.SpotDrainTimeout > 2*time.Minute {
		e.fail(fmt.Errorf("SPOT_DRAIN_TIMEOUT=%s: must fit the 2-minute spot notice", c.SpotDrainTimeout))
	}
	if c.SpotGracePeriodCap > 2*time.Minute {
		e.fail(fmt.Errorf("SPOT_GRACE_PERIOD_CAP=%s: must fit the 2-minute spot notice", c.SpotGracePeriodCap))
	}
}

// Mode says how the function reaches the cluster.
func (c Config) Mode() string {
	switch {
	case c.KubeconfigPath != "" || c.KubeconfigSSMParameter != "" || c.KubeconfigSecretID != "":
		return "kubeconfig"
	case c.ClusterEndpoint != "":
		return "self-managed"
	default:
		return "eks"
	}
}

// list splits a comma-separated list, dropping blanks.
func list(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// SkipsOwner reports whether nodes of the named lifecycle owner are left to it.
func (c Config) SkipsOwner(owner string) bool {
	return slices.Contains(c.SkipNodesOwnedBy, owner)
}

// OwnsHook reports whether the named lifecycle hook is ours to complete:
// the terminate or launch hook the templates create, or one HOOK_NAMES
// lists. Any other hook (another tool's, on the same group) is never
// completed, whatever the path (ARCHITECTURE.md §4, rule 14).
func (c Config) OwnsHook(name string) bool {
	return name != "" && (name == c.TerminateHookName || name == c.LaunchHookName || slices.Contains(c.HookNames, name))
}

// OwnedHooks lists the names OwnsHook accepts.
func (c Config) OwnedHooks() []string {
	return slices.Compact(slices.Sorted(slices.Values(append([]string{c.TerminateHookName, c.LaunchHookName}, c.HookNames...))))
}

// ListsASG reports whether the ASG is named in ASG_NAMES (not merely allowed
// because the list is empty): its hooks are ours by configuration.
func (c Config) ListsASG(name string) bool {
	return slices.Contains(c.ASGNames, name)
}

// AllowsASG reports whether hooks of the named ASG are ours by
// configuration alone: it is listed, or nothing selects groups (no
// ASG_NAMES, no ASG_TAG_KEY: any ASG). A group that is neither may still be
// ours by its tag (SelectsByTag), which only a reading can tell.
func (c Config) AllowsASG(name string) bool {
	return (len(c.ASGNames) == 0 && c.ASGTagKey == "") || slices.Contains(c.ASGNames, name)
}

// SelectsByTag reports whether groups carrying ASG_TAG_KEY=ASG_TAG_VALUE are
// ours.
func (c Config) SelectsByTag() bool { return c.ASGTagKey != "" }

// tagPattern is what Auto Scaling accepts in a tag's key and value (letters,
// digits, spaces and + - = . _ : / @), which also keeps them safe inside the
// IAM condition key the templates build from them.
var tagPattern = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)

// validTag checks a selecting tag: a key of 1–128 characters, a value of at
// most 256, both of Auto Scaling's characters (the templates' patterns).
func validTag(key, value string) error {
	switch {
	case len(key) > 128 || !tagPattern.MatchString(key):
		return fmt.Errorf("ASG_TAG_KEY=%q: want at most 128 letters, digits, spaces or + - = . _ : / @", key)
	case len(value) > 256 || !tagPattern.MatchString(value):
		return fmt.Errorf("ASG_TAG_VALUE=%q: want at most 256 letters, digits, spaces or + - = . _ : / @", value)
	}
	return nil
}
