package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/node-drainer/node-drainer/internal/logging"
	"github.com/node-drainer/node-drainer/internal/metrics"
)

// repoRoot is where template.yaml and terraform/ live, seen from this package.
const repoRoot = "../.."

func load(t *testing.T, root string) (sam, tf *Spec) {
	t.Helper()
	sam, err := LoadSAM(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatalf("LoadSAM: %v", err)
	}
	tf, err = LoadTerraform(filepath.Join(root, "terraform"))
	if err != nil {
		t.Fatalf("LoadTerraform: %v", err)
	}
	return sam, tf
}

func TestSAMAndTerraformAgree(t *testing.T) {
	sam, tf := load(t, repoRoot)
	if diff := Diff(sam, tf); len(diff) > 0 {
		t.Errorf("template.yaml and terraform/ disagree (%d differences):\n%s", len(diff), strings.Join(diff, "\n"))
	}
}

// The configuration contract internal/config implements: every variable and
// its default. Both descriptions must pass exactly these.
var wantEnv = map[string]string{
	"CLUSTER_NAME":                "${param:cluster_name}", // required
	"CLUSTER_ENDPOINT":            "",
	"CLUSTER_CA_DATA":             "",
	"KUBECONFIG_SSM_PARAMETER":    "",
	"KUBECONFIG_SECRET_ID":        "",
	"ASG_NAMES":                   "", // AsgNames, AsgTagKey or both
	"CLUSTER_TAG_KEY":             "",
	"ASG_TAG_KEY":                 "node-drainer.io/enabled",
	"ASG_TAG_VALUE":               "true",
	"CREATE_TERMINATE_HOOK":       "true",
	"CREATE_LAUNCH_HOOK":          "false",
	"HEARTBEAT_TIMEOUT":           "360",
	"DRY_RUN":                     "false",
	"DRAIN_TIMEOUT":               "30m",
	"SPOT_DRAIN_TIMEOUT":          "100s",
	"SPOT_GRACE_PERIOD_CAP":       "90s",
	"CRITICAL_PRIORITY_THRESHOLD": "2000000000",
	"REBALANCE_ACTION":            "cordon",
	"SCHEDULED_CHANGE_ACTION":     "drain",
	"SCHEDULED_CHANGE_LEAD_TIME":  "15m",
	"LIFECYCLE_RESULT_ON_FAILURE": "CONTINUE",
	"EVICT_UNMANAGED_PODS":        "true",
	"POD_POLICY":                  "ignore",
	"VOLUME_DETACH_TIMEOUT":       "2m",
	"STOPPING_WAIT_TIMEOUT":       "3m",
	"OUT_OF_SERVICE_TAINT":        "true",
	"DELETE_TERMINATED_NODES":     "false",
	"BATCH_CORDON":                "false",
	"NODE_CONDITIONS":             "false",
	"KUBE_CLIENT_QPS":             "100",
	"KUBE_CLIENT_BURST":           "200",
	"DEADLINE_MARGIN":             "20s",
	"OUTCOME_EVENT_BUS":           "",
	"OUTCOME_BLOCKED_AFTER":       "5m",
	"CONTINUE_LONG_DRAINS":        "true",
	"MAX_CONTINUATIONS":           "20",
	"HOOK_NAMES":                  "",
	"TERMINATE_HOOK_NAME":         "node-drainer-terminate",
	"LAUNCH_HOOK_NAME":            "node-drainer-launch",
	"ADVISORY_MARK_TTL":           "1h",
	"GROUP_POLICY_TAGS":           "false",
	"LB_DRAIN_WAIT":               "0",
	"SKIP_NODES_OWNED_BY":         "karpenter,auto-mode,managed-nodegroup",
	"DEAD_NODE_EVICTION_WINDOW":   "30s",
	"NODE_LEASE_STALE_AFTER":      "15s",
	"LEASE_NAMESPACE":             "node-drainer",
	"ZOMBIE_AFTER":                "10m",
	"ZOMBIE_ACTION":               "report",
	"ZOMBIE_MAX_PER_SWEEP":        "1",
	"ZOMBIE_MAX_ASG_SHARE":        "10",
	"SWEEP_SHARD_NODES":           "5000",
	"LOG_LEVEL":                   "INFO",
}

// The event kinds the function handles (the "Events" table of docs/architecture.md), by rule name
// suffix, with the exact pattern each rule must have.
// With the default AsgTagKey (groups chosen by tag) the hook rules match on
// the hook's name alone: the groups are not known at deployment.
var wantRules = map[string]string{
	"terminate-hook":        `{"detail":{"LifecycleHookName":["node-drainer-terminate"]},"detail-type":["EC2 Instance-terminate Lifecycle Action"],"source":["aws.autoscaling"]}`,
	"launch-hook":           `{"detail":{"LifecycleHookName":["node-drainer-launch"]},"detail-type":["EC2 Instance-launch Lifecycle Action"],"source":["aws.autoscaling"]}`,
	"spot-interruption":     `{"detail-type":["EC2 Spot Instance Interruption Warning"],"source":["aws.ec2"]}`,
	"capacity-interruption": `{"detail-type":["EC2 Capacity Reservation Instance Interruption Warning","EC2 Interruptible Capacity Reservation Instance Interruption Warning"],"source":["aws.ec2"]}`,
	"capacity-block":        `{"detail-type":["Capacity Block Expiration Warning","Capacity Block Reservation Expiration Warning"],"source":["aws.ec2"]}`,
	"rebalance":             `{"detail-type":["EC2 Instance Rebalance Recommendation"],"source":["aws.ec2"]}`,
	"state-change":          `{"detail":{"state":["running","shutting-down","stopped","stopping","terminated"]},"detail-type":["EC2 Instance State-change Notification"],"source":["aws.ec2"]}`,
	"scheduled-change":      `{"detail":{"eventTypeCategory":["scheduledChange"],"service":["EC2"]},"detail-type":["AWS Health Event"],"source":["aws.health"]}`,
}

// The sweep (internal/event/sweep.go recognises its Scheduled Event), by rule
// name suffix: its schedule as deployed with the defaults.
var wantSchedules = map[string]Schedule{
	"sweep": {Expression: "rate(5 minutes)", State: "ENABLED"},
}

var wantActions = []string{
	"autoscaling:CompleteLifecycleAction",
	"autoscaling:DeleteLifecycleHook", // the stack removing its hooks (internal/hooks/stack.go)
	"autoscaling:DescribeAutoScalingGroups",
	"autoscaling:DescribeLifecycleHooks",
	"autoscaling:DescribeWarmPool",
	"autoscaling:PutLifecycleHook",
	"autoscaling:RecordLifecycleActionHeartbeat",
	"autoscaling:SetInstanceHealth",
	"ec2:DescribeInstances",
	"eks:DescribeCluster",
	"events:PutEvents", // outcome events, on the one bus named (OutcomeEventBus only)
	"kms:Decrypt",
	"kms:GenerateDataKey",
	"lambda:InvokeFunction",
	"lambda:ListTags", // the removal's mark on the function itself (internal/hooks/removal.go)
	"lambda:TagResource",
	"lambda:UntagResource",
	"logs:CreateLogStream",
	"logs:PutLogEvents",
	"secretsmanager:GetSecretValue",
	"sqs:SendMessage",
	"ssm:GetParameter",
}

// The alarms both descriptions create (name suffix after "node-drainer-"):
// what each watches. The NodeDrainer ones read the function's EMF metrics
// (internal/metrics, written by internal/handler).
var wantAlarms = map[string]AlarmSpec{
	"dlq-not-empty":     {Namespace: "AWS/SQS", Metric: "ApproximateNumberOfMessagesVisible", Statistic: "Maximum", Dimensions: "QueueName=${ref}"},
	"errors":            {Namespace: "AWS/Lambda", Metric: "Errors", Statistic: "Sum", Dimensions: "FunctionName=${ref}"},
	"throttles":         {Namespace: "AWS/Lambda", Metric: "Throttles", Statistic: "Sum", Dimensions: "FunctionName=${ref}"},
	"hooks-abandoned":   {Namespace: metrics.Namespace, Metric: "HooksCompleted", Statistic: "Sum", Dimensions: "FunctionName=node-drainer,LifecycleResult=ABANDON"},
	"hooks-at-deadline": {Namespace: metrics.Namespace, Metric: "HooksCompleted", Statistic: "Sum", Dimensions: "CompletionReason=at-deadline,FunctionName=node-drainer"},
}

var wantFunction = map[string]string{
	"runtime":       "provided.al2023",
	"architectures": "arm64",
	"handler":       "bootstrap",
	"timeout":       "900",
	"memory_size":   "256",
	"log_format":    "JSON",
	// Lambda's filter keeps every line; the function applies LOG_LEVEL
	// (internal/logging), so the metrics lines survive every level
	"application_log_level": logging.LambdaFilterLevel,
}

// Agreement alone would pass if both sides lost the same thing; each side is
// also held to the contract.
func TestBothMatchTheContract(t *testing.T) {
	sam, tf := load(t, repoRoot)
	for _, s := range []*Spec{sam, tf} {
		t.Run(s.Source, func(t *testing.T) {
			for name, want := range wantEnv {
				got, ok := s.Env[name]
				if !ok {
					t.Errorf("env %s missing", name)
					continue
				}
				if got.Default != want {
					t.Errorf("env %s default = %q, want %q", name, got.Default, want)
				}
				if len(got.Params) != 1 {
					t.Errorf("env %s should come from one parameter, comes from %v", name, got.Params)
				}
			}
			for name := range s.Env {
				if _, ok := wantEnv[name]; !ok {
					t.Errorf("env %s is not in the contract", name)
				}
			}

			if len(s.Rules) != len(wantRules) {
				t.Errorf("%d rules, want %d: %v", len(s.Rules), len(wantRules), sortedKeys(s.Rules))
			}
			for suffix, want := range wantRules {
				if got := s.Rules["node-drainer-"+suffix]; got != want {
					t.Errorf("rule node-drainer-%s pattern\n got %s\nwant %s", suffix, got, want)
				}
			}

			if len(s.Schedules) != len(wantSchedules) {
				t.Errorf("%d schedule rules, want %d: %v", len(s.Schedules), len(wantSchedules), sortedKeys(s.Schedules))
			}
			for suffix, want := range wantSchedules {
				if got := s.Schedules["node-drainer-"+suffix]; got != want {
					t.Errorf("schedule rule node-drainer-%s = %+v, want %+v", suffix, got, want)
				}
			}

			if got := s.Actions(); !slices.Equal(got, wantActions) {
				t.Errorf("IAM actions\n got %v\nwant %v", got, wantActions)
			}
			for k, want := range wantFunction {
				if got := s.Function[k]; got != want {
					t.Errorf("function %s = %q, want %q", k, got, want)
				}
			}

			term := s.Hooks["autoscaling:EC2_INSTANCE_TERMINATING"]
			if term.DefaultResult != "CONTINUE" || term.HeartbeatTimeout != "360" {
				t.Errorf("terminate hook = %+v, want DefaultResult CONTINUE, HeartbeatTimeout 360", term)
			}
			if !slices.Equal(s.AccessEntryGroups, []string{"node-drainer"}) {
				t.Errorf("access entry groups = %v, want [node-drainer]", s.AccessEntryGroups)
			}

			if len(s.Alarms) != len(wantAlarms) {
				t.Errorf("%d alarms, want %d: %v", len(s.Alarms), len(wantAlarms), sortedKeys(s.Alarms))
			}
			for suffix, want := range wantAlarms {
				got, ok := s.Alarms["node-drainer-"+suffix]
				if !ok {
					t.Errorf("alarm node-drainer-%s missing", suffix)
					continue
				}
				// any datum fires them, with no action unless a topic is given
				want.Period, want.EvaluationPeriods, want.Threshold = "300", "1", "0"
				want.Comparison, want.TreatMissingData, want.Actions = "GreaterThanThreshold", "notBreaching", ""
				if got != want {
					t.Errorf("alarm node-drainer-%s\n got %+v\nwant %+v", suffix, got, want)
				}
			}
			if p, ok := s.Params["alarm_topic_arn"]; !ok || p.Default != "" {
				t.Errorf("parameter alarm_topic_arn = %+v, %v: want it, empty by default", p, ok)
			}
		})
	}
}

func TestLeastPrivilege(t *testing.T) {
	sam, tf := load(t, repoRoot)
	for _, s := range []*Spec{sam, tf} {
		for _, p := range LeastPrivilegeProblems(s) {
			t.Error(p)
		}
		// The lifecycle actions are scoped to the listed groups, or to any
		// group under the condition that it carries the selecting tag; an
		// action without resource types is granted on "*" (an ARN would never
		// match it, and the call would be denied).
		for _, st := range s.Statements {
			for _, a := range st.Actions {
				if UnscopedActions[a] && !slices.Equal(st.Resources, []string{"*"}) {
					t.Errorf("%s: statement %q: %s has no resource types and needs Resource \"*\", has %v", s.Source, st.Sid, a, st.Resources)
				}
			}
			if slices.Contains(st.Actions, "autoscaling:CompleteLifecycleAction") || slices.Contains(st.Actions, "autoscaling:SetInstanceHealth") ||
				slices.Contains(st.Actions, "autoscaling:PutLifecycleHook") {
				listed := []string{"arn:${aws:partition}:autoscaling:${aws:region}:${aws:account}:autoScalingGroup:*:autoScalingGroupName/${param:asg_names}"}
				anyGroup := []string{"arn:${aws:partition}:autoscaling:${aws:region}:${aws:account}:autoScalingGroup:*:autoScalingGroupName/*"}
				tagged := `{"StringEquals":{"autoscaling:ResourceTag/node-drainer.io/enabled":["true"]}}`
				// SAM's listed groups: the names joined into ARNs (a Join's
				// delimiter is a literal: partition, region and account are
				// wildcards), here with AsgNames' default, the empty list;
				// its hooks are put by the function (Custom::LifecycleHooks)
				samListed := []string{"arn:*:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/"}
				switch {
				case slices.Equal(st.Resources, anyGroup) && st.Condition == tagged:
				case slices.Equal(st.Resources, listed) && st.Condition == "" && !slices.Contains(st.Actions, "autoscaling:PutLifecycleHook"):
				case s.Source == "sam" && slices.Equal(st.Resources, samListed) && st.Condition == "":
				case s.Source == "terraform" && len(st.Resources) == 0 && st.Condition == "": // the listed groups' statement, none listed by default
				default:
					t.Errorf("%s: statement %q: lifecycle actions %v on %v under %q; want the listed groups %v, or %v under %s",
						s.Source, st.Sid, st.Actions, st.Resources, st.Condition, listed, anyGroup, tagged)
				}
			}
		}
	}
}

func TestClusterRole(t *testing.T) {
	// every manifest: the lease namespace's and the node deletion's too
	rbac, err := RBACFor(filepath.Join(repoRoot, "terraform", "kubernetes"), RBACSetting{"node-drainer", true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rbac.WildcardProblems() {
		t.Error(p)
	}
	// The group the access entry maps the role to is the one bound to the ClusterRole.
	sam, tf := load(t, repoRoot)
	for _, s := range []*Spec{sam, tf} {
		for _, g := range s.AccessEntryGroups {
			if !slices.Contains(rbac.BoundGroups, g) {
				t.Errorf("%s: access entry group %q is not bound in rbac.yaml (bound: %v)", s.Source, g, rbac.BoundGroups)
			}
		}
	}
}

// copyTree copies what the checks read into a temporary root.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	files := []string{"template.yaml", filepath.FromSlash(rbacYAML), filepath.FromSlash(rbacLeaseYAML), filepath.FromSlash(rbacDeleteNodesYAML)}
	// the module's *.tf and the templates they read (*.tftpl)
	tfFiles, err := filepath.Glob(filepath.Join(repoRoot, "terraform", "*.tf*"))
	if err != nil || len(tfFiles) == 0 {
		t.Fatalf("no terraform files: %v", err)
	}
	for _, f := range tfFiles {
		rel, _ := filepath.Rel(repoRoot, f)
		files = append(files, rel)
	}
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// mutate replaces old, which must occur exactly once, so that a mutation
// cannot silently stop applying when the files change.
func mutate(t *testing.T, root, rel, old, replacement string) {
	t.Helper()
	path := filepath.Join(root, rel)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), old); n != 1 {
		t.Fatalf("mutation of %s: %q occurs %d times, want 1", rel, old, n)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, replacement, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	samFile  = "template.yaml"
	mainTF   = "terraform/main.tf"
	iamTF    = "terraform/iam.tf"
	eventsTF = "terraform/events.tf"
	varsTF   = "terraform/variables.tf"
	alarmsTF = "terraform/alarms.tf"
	rbacYAML = "terraform/kubernetes/rbac.yaml"

	rbacLeaseYAML       = "terraform/kubernetes/" + RBACLeaseNamespace
	rbacDeleteNodesYAML = "terraform/kubernetes/" + RBACDeleteNodes
	appendTag           = "\x00append" // old string meaning "append new at the end"
)

// TestDetectsDrift changes one side alone and expects the comparison to fail
// with a message naming what drifted.
func TestDetectsDrift(t *testing.T) {
	tests := []struct {
		name, file, old, new, want string
	}{
		{"state-change states in SAM", samFile,
			"state: [stopping, stopped, shutting-down, terminated, running]",
			"state: [stopping, stopped, shutting-down, terminated]",
			"event rule node-drainer-state-change pattern"},
		{"health category in terraform", eventsTF,
			`eventTypeCategory = ["scheduledChange"]`, `eventTypeCategory = ["issue"]`,
			"event rule node-drainer-scheduled-change pattern"},
		{"terminate rule hook filter in terraform", eventsTF,
			`LifecycleHookName = [var.terminate_hook_name]`, `LifecycleHookName = [var.launch_hook_name]`,
			"event rule node-drainer-terminate-hook pattern"},
		{"ASG filter kept in tag mode in SAM", samFile,
			"                - SelectsByTag\n                - LifecycleHookName: [!Ref LaunchHookName]\n",
			"                - SelectsByTag\n                - AutoScalingGroupName: !Ref AsgNames\n                  LifecycleHookName: [!Ref LaunchHookName]\n",
			"event rule node-drainer-launch-hook pattern"},
		{"tag condition dropped in SAM", samFile,
			`"autoscaling:RecordLifecycleActionHeartbeat"],"Resource":"arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*:autoScalingGroupName/*","Condition":{"StringEquals":{"autoscaling:ResourceTag/${AsgTagKey}"`,
			`"autoscaling:RecordLifecycleActionHeartbeat"],"Resource":"arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*:autoScalingGroupName/*","Condition":{"StringEquals":{"aws:RequestedRegion"`,
			`IAM statement "GroupTagLifecycle" condition`},
		{"PutLifecycleHook dropped in terraform", "terraform/discovery.tf",
			`"autoscaling:PutLifecycleHook", `, "",
			"IAM action autoscaling:PutLifecycleHook: only in sam"},
		{"rule renamed in terraform", eventsTF, "    rebalance = {", "    rebalance-recommendation = {",
			"event rule node-drainer-rebalance: only in sam"},
		{"Capacity Block spelling dropped in SAM", samFile,
			"                - Capacity Block Expiration Warning\n                - Capacity Block Reservation Expiration Warning\n",
			"                - Capacity Block Expiration Warning\n",
			"event rule node-drainer-capacity-block pattern"},
		{"capacity interruption spelling dropped in terraform", eventsTF,
			"\"EC2 Interruptible Capacity Reservation Instance Interruption Warning\",\n", "",
			"event rule node-drainer-capacity-interruption pattern"},
		{"IAM action changed in terraform", iamTF, `"ec2:DescribeInstances"`, `"ec2:DescribeInstanceStatus"`,
			"IAM action ec2:DescribeInstances: only in sam"},
		{"IAM action dropped in SAM", samFile, "              - autoscaling:CompleteLifecycleAction\n              - autoscaling:RecordLifecycleActionHeartbeat\n", "              - autoscaling:CompleteLifecycleAction\n",
			`IAM statement "LifecycleAction" actions`},
		{"DescribeLifecycleHooks dropped in SAM", samFile,
			"              - Sid: DescribeLifecycleHooks\n                Effect: Allow\n                Action: autoscaling:DescribeLifecycleHooks\n                Resource: \"*\"\n",
			"", "IAM action autoscaling:DescribeLifecycleHooks: only in terraform"},
		{"DescribeCluster widened in terraform", iamTF,
			`resources = ["arn:${local.partition}:eks:${local.region}:${local.account}:cluster/${var.cluster_name}"]`,
			`resources = ["*"]`,
			`IAM statement "DescribeCluster" resources`},
		{"VPC policy dropped in terraform", iamTF, "AWSLambdaVPCAccessExecutionRole", "AWSLambdaENIManagementAccess",
			"managed policy"},
		{"env var dropped in terraform", mainTF, "    DRY_RUN                     = tostring(var.dry_run)\n", "",
			"env DRY_RUN: only in sam"},
		{"env default in SAM", samFile, "Default: 30m", "Default: 45m", "env DRAIN_TIMEOUT default"},
		{"env wired to another variable in terraform", mainTF,
			"EVICT_UNMANAGED_PODS        = tostring(var.evict_unmanaged_pods)",
			"EVICT_UNMANAGED_PODS        = tostring(var.out_of_service_taint)",
			"env EVICT_UNMANAGED_PODS built from"},
		{"runtime in terraform", mainTF, `"provided.al2023"`, `"provided.al2"`, "function runtime"},
		{"architecture in SAM", samFile, "Architectures: [arm64]", "Architectures: [x86_64]", "function architectures"},
		{"handler in SAM", samFile, "Handler: bootstrap", "Handler: main", "function handler"},
		{"timeout in terraform", mainTF, "timeout                        = 900", "timeout                        = 600", "function timeout"},
		{"memory default in terraform", varsTF, "default     = 256", "default     = 512", "function memory_size"},
		{"hook heartbeat default in SAM", samFile, "Default: 360\n", "Default: 600\n", "lifecycle hook autoscaling:EC2_INSTANCE_TERMINATING"},
		{"hook result in terraform", mainTF,
			"lifecycle_transition   = \"autoscaling:EC2_INSTANCE_TERMINATING\"\n  heartbeat_timeout      = var.heartbeat_timeout\n  default_result         = \"CONTINUE\"",
			"lifecycle_transition   = \"autoscaling:EC2_INSTANCE_TERMINATING\"\n  heartbeat_timeout      = var.heartbeat_timeout\n  default_result         = \"ABANDON\"",
			"lifecycle hook autoscaling:EC2_INSTANCE_TERMINATING"},
		{"sweep schedule in SAM", samFile,
			`Schedule: !If [SweepOn, !Ref SweepSchedule, "rate(5 minutes)"]`, `Schedule: "rate(1 hour)"`,
			"schedule rule node-drainer-sweep"},
		{"sweep disabled in terraform", eventsTF,
			`state               = local.sweep_on ? "ENABLED" : "DISABLED"`, `state               = "DISABLED"`,
			"schedule rule node-drainer-sweep"},
		{"sweep rule renamed in terraform", eventsTF,
			`name                = "${var.function_name}-sweep"`, `name                = "${var.function_name}-reconcile"`,
			"schedule rule node-drainer-sweep: only in sam"},
		{"sweep schedule default in terraform", varsTF,
			`default     = "rate(5 minutes)"`, `default     = "rate(10 minutes)"`,
			"schedule rule node-drainer-sweep"},
		{"SetInstanceHealth dropped in terraform", iamTF,
			`actions   = ["autoscaling:SetInstanceHealth"]`, `actions   = ["autoscaling:CompleteLifecycleAction"]`,
			`IAM statement "InstanceHealth" actions`},
		{"variable only in terraform", varsTF, appendTag,
			"\nvariable \"extra_knob\" {\n  type    = string\n  default = \"x\"\n}\n",
			"parameter extra_knob: only in terraform"},
		{"access entry group in terraform", mainTF, `kubernetes_groups = ["node-drainer"]`, `kubernetes_groups = ["drainers"]`,
			"access entry group"},
		{"output dropped in SAM", samFile, "  RoleArn:\n", "  TheRoleArn:\n", "output role_arn: only in terraform"},
		{"alarm dimension in terraform", alarmsTF, `LifecycleResult = "ABANDON"`, `LifecycleResult = "CONTINUE"`,
			"alarm node-drainer-hooks-abandoned"},
		{"alarm dropped in SAM", samFile, "  FunctionThrottlesAlarm:\n    Type: AWS::CloudWatch::Alarm", "  FunctionThrottlesAlarm:\n    Type: AWS::CloudWatch::AnomalyDetector",
			"alarm node-drainer-throttles: only in terraform"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t)
			if tt.old == appendTag {
				f, err := os.OpenFile(filepath.Join(root, tt.file), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteString(tt.new); err != nil {
					t.Fatal(err)
				}
				f.Close()
			} else {
				mutate(t, root, tt.file, tt.old, tt.new)
			}
			sam, tf := load(t, root)
			diff := Diff(sam, tf)
			if len(diff) == 0 {
				t.Fatal("no difference found after changing one side")
			}
			joined := strings.Join(diff, "\n")
			if !strings.Contains(joined, tt.want) {
				t.Errorf("differences do not mention %q:\n%s", tt.want, joined)
			}
		})
	}
}

func TestDetectsWildcards(t *testing.T) {
	t.Run("terraform wildcard action", func(t *testing.T) {
		root := copyTree(t)
		mutate(t, root, iamTF, `actions   = ["ec2:DescribeInstances"]`, `actions   = ["ec2:*"]`)
		_, tf := load(t, root)
		if p := strings.Join(LeastPrivilegeProblems(tf), "\n"); !strings.Contains(p, `wildcard action "ec2:*"`) {
			t.Errorf("problems = %q, want a wildcard action", p)
		}
	})
	t.Run("SAM send on any queue", func(t *testing.T) {
		root := copyTree(t)
		mutate(t, root, samFile, "                Action: sqs:SendMessage\n                Resource: !GetAtt DeadLetterQueue.Arn",
			"                Action: sqs:SendMessage\n                Resource: \"*\"")
		sam, _ := load(t, root)
		if p := strings.Join(LeastPrivilegeProblems(sam), "\n"); !strings.Contains(p, `"sqs:SendMessage" on Resource "*"`) {
			t.Errorf("problems = %q, want sqs:SendMessage on *", p)
		}
	})
	t.Run("DescribeCluster on any cluster in both", func(t *testing.T) {
		root := copyTree(t)
		mutate(t, root, iamTF,
			`resources = ["arn:${local.partition}:eks:${local.region}:${local.account}:cluster/${var.cluster_name}"]`,
			`resources = ["*"]`)
		mutate(t, root, samFile,
			`Resource: !Sub "arn:${AWS::Partition}:eks:${AWS::Region}:${AWS::AccountId}:cluster/${ClusterName}"`,
			`Resource: "*"`)
		sam, tf := load(t, root)
		for _, s := range []*Spec{sam, tf} {
			if p := strings.Join(LeastPrivilegeProblems(s), "\n"); !strings.Contains(p, `"eks:DescribeCluster" on Resource "*"`) {
				t.Errorf("%s problems = %q, want eks:DescribeCluster on *", s.Source, p)
			}
		}
	})
	t.Run("ClusterRole wildcard verb", func(t *testing.T) {
		root := copyTree(t)
		mutate(t, root, rbacYAML, "    resources: [\"daemonsets\"]\n    verbs: [\"get\"]", "    resources: [\"daemonsets\"]\n    verbs: [\"*\"]")
		rbac, err := LoadRBAC(filepath.Join(root, rbacYAML))
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(rbac.WildcardProblems(), "\n"); !strings.Contains(p, `verbs contains "*"`) {
			t.Errorf("problems = %q, want a wildcard verb", p)
		}
	})
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"AsgNames":             "asg_names",
		"KubeClientQps":        "kube_client_qps",
		"ClusterCaData":        "cluster_ca_data",
		"DeadLetterQueueUrl":   "dead_letter_queue_url",
		"AwsAuthMapRolesEntry": "aws_auth_map_roles_entry",
		"Ec2Thing":             "ec2_thing",
	} {
		if got := SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCloudFormationIntrinsics(t *testing.T) {
	tmpl := &cfnTemplate{
		params: map[string]cfnParam{
			"Name":  {typ: "String", def: "fn", hasDefault: true},
			"Names": {typ: "CommaDelimitedList"},
			"Flag":  {typ: "String", def: "true", hasDefault: true},
		},
		conditions: map[string]any{"On": map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "Flag"}, "true"}}},
		byID:       map[string]*cfnResource{},
	}
	r := cfnResolver{t: tmpl}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"ref default", map[string]any{"Ref": "Name"}, "fn"},
		{"ref required list", map[string]any{"Ref": "Names"}, "${param:names}"},
		{"sub with pseudo and attribute", map[string]any{"Fn::Sub": "arn:${AWS::Partition}:x:${Name}/${Role.Arn}/${!Literal}"},
			"arn:${aws:partition}:x:fn/${ref}/${Literal}"},
		{"sub with map", map[string]any{"Fn::Sub": []any{"a-${X}", map[string]any{"X": map[string]any{"Ref": "Name"}}}}, "a-fn"},
		{"join", map[string]any{"Fn::Join": []any{",", []any{"a", map[string]any{"Ref": "Name"}}}}, "a,fn"},
		{"select split", map[string]any{"Fn::Select": []any{"1", map[string]any{"Fn::Split": []any{"/", "a/b/c"}}}}, "b"},
		{"if true", map[string]any{"Fn::If": []any{"On", "yes", "no"}}, "yes"},
		{"getatt", map[string]any{"Fn::GetAtt": []any{"R", "Arn"}}, "${ref}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stringify(r.resolve(tt.in)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
