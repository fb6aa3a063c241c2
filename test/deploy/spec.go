// Package deploy reads node-drainer's two deployment descriptions — the SAM
// template (template.yaml) and the terraform module (terraform/) — into one
// comparable Spec, so that a test fails when they drift apart: event patterns,
// schedule rules, IAM actions, environment variables and their defaults, the
// function's runtime settings, parameters, hooks, alarms and outputs. It also checks the
// least-privilege rules both must keep (no wildcard IAM action, no wildcard in
// the ClusterRole).
//
// Values are resolved the way a default deployment would see them: a reference
// to a parameter/variable becomes its default, or the marker ${param:<name>}
// when it has none; AWS pseudo parameters and their terraform data sources
// become ${aws:partition}, ${aws:region} and ${aws:account}; anything only known
// after deployment (another resource's ARN) becomes ${ref}.
package deploy

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Markers that stand for values unknown before deployment.
const (
	markerRef       = "${ref}"
	markerPartition = "${aws:partition}"
	markerRegion    = "${aws:region}"
	markerAccount   = "${aws:account}"
)

func paramMarker(snakeName string) string { return "${param:" + snakeName + "}" }

// Spec is what both descriptions must agree on.
type Spec struct {
	// Source names the description ("sam" or "terraform") in messages.
	Source string
	// Function holds runtime, architectures, handler, timeout and memory_size,
	// resolved to strings (lists joined with ",").
	Function map[string]string
	// Env maps each environment variable of the function to its default.
	Env map[string]EnvVar
	// Rules maps each EventBridge rule's name to its pattern as canonical JSON.
	Rules map[string]string
	// Schedules maps each scheduled EventBridge rule's name (a rule with a
	// schedule expression, no pattern) to its expression and state.
	Schedules map[string]Schedule
	// Statements are the statements of the function role's permission
	// policies (trust policy excluded), every conditional branch included.
	Statements []Statement
	// ManagedPolicies are the managed policy ARNs attached to the role.
	ManagedPolicies []string
	// Hooks maps a lifecycle transition to the hook created for it.
	Hooks map[string]Hook
	// AccessEntryGroups are the Kubernetes groups of the EKS access entry.
	AccessEntryGroups []string
	// Params maps snake_case parameter/variable names to their defaults.
	Params map[string]Param
	// Outputs are the snake_case output names.
	Outputs []string
	// Alarms maps each CloudWatch alarm's name to what it watches (AlarmSpec).
	Alarms map[string]AlarmSpec
	// Routes maps each rule on a bus of the operator's (EventBusName set:
	// the outcome events' route to people) to its bus, pattern and targets
	// (ARN, input paths and template) as canonical JSON, whatever its
	// condition: both descriptions must offer the same route.
	Routes map[string]string
}

// AlarmSpec is what a CloudWatch metric alarm watches and when it fires;
// Actions are the alarm actions of a default deployment (none: "").
type AlarmSpec struct {
	Namespace, Metric, Statistic string
	Dimensions                   string // name=value, sorted, comma separated
	Period, EvaluationPeriods    string
	Threshold, Comparison        string
	TreatMissingData, Actions    string
}

// EnvVar is one environment variable of the function.
type EnvVar struct {
	Default string
	// Params are the snake_case parameters/variables the value is built from.
	Params []string
}

// Statement is one IAM policy statement.
type Statement struct {
	Sid       string
	Actions   []string
	Resources []string
	// Conditional is set when the resources depend on a condition (every
	// branch is listed); such resources are not compared, only the actions.
	Conditional bool
	// Condition is the statement's IAM Condition, canonical JSON of
	// operator -> key -> sorted values ("" when none).
	Condition string
}

// canonicalCondition renders an IAM Condition (operator -> key -> a value or
// a list of values) as canonical JSON, every value a sorted list.
func canonicalCondition(c map[string]map[string][]string) string {
	if len(c) == 0 {
		return ""
	}
	for _, keys := range c {
		for k := range keys {
			sort.Strings(keys[k])
		}
	}
	b, err := json.Marshal(c) // maps: keys sorted
	if err != nil {
		return fmt.Sprint(c)
	}
	return string(b)
}

// Schedule is one scheduled EventBridge rule.
type Schedule struct {
	Expression string
	// State is ENABLED or DISABLED as deployed with the defaults.
	State string
}

// Hook is one lifecycle hook definition.
type Hook struct {
	Name             string
	HeartbeatTimeout string
	DefaultResult    string
}

// Param is one input of the deployment.
type Param struct {
	Default  string
	Required bool
}

// Actions returns the sorted set of IAM actions of all statements.
func (s *Spec) Actions() []string {
	set := map[string]bool{}
	for _, st := range s.Statements {
		for _, a := range st.Actions {
			set[a] = true
		}
	}
	return sortedKeys(set)
}

// OnlyInSAMStatements are the IAM statements that one template has alone
// on purpose: SAM's function puts the listed groups' hooks
// (Custom::LifecycleHooks), terraform creates them as resources.
var OnlyInSAMStatements = map[string]bool{"ListedGroupHooks": true}

// OnlyInTerraform lists the terraform variables and outputs that have no SAM
// twin on purpose.
var OnlyInTerraform = map[string]bool{
	"package_path":      true, // SAM builds the code itself (sam build)
	"s3_bucket":         true, // the package in S3: sam deploy uploads it
	"s3_key":            true,
	"s3_object_version": true,
	"architecture":      true, // the package's: sam build builds arm64 (the Makefile's build-NodeDrainerFunction)
	"rbac":              true, // the output modules/rbac takes; SAM users apply terraform/kubernetes/*.yaml
	"tags":              true, // sam deploy --tags
}

// Diff lists every way a and b disagree; empty means they agree.
func Diff(a, b *Spec) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	diffStringMaps("function", a.Source, b.Source, a.Function, b.Function, add)

	for _, name := range unionKeys(a.Env, b.Env) {
		ea, inA := a.Env[name]
		eb, inB := b.Env[name]
		switch {
		case !inA:
			add("env %s: only in %s", name, b.Source)
		case !inB:
			add("env %s: only in %s", name, a.Source)
		default:
			if ea.Default != eb.Default {
				add("env %s default: %s=%q %s=%q", name, a.Source, ea.Default, b.Source, eb.Default)
			}
			if strings.Join(ea.Params, ",") != strings.Join(eb.Params, ",") {
				add("env %s built from: %s=%v %s=%v", name, a.Source, ea.Params, b.Source, eb.Params)
			}
		}
	}

	diffMaps(a, b, "event rule", " pattern", a.Rules, b.Rules, nil, add)
	diffMaps(a, b, "route", "", a.Routes, b.Routes, nil, add)
	diffMaps(a, b, "schedule rule", "", a.Schedules, b.Schedules, nil, add)

	diffSets("IAM action", a.Source, b.Source, a.Actions(), b.Actions(), add)
	diffStatements(a, b, add)
	diffSets("managed policy", a.Source, b.Source, a.ManagedPolicies, b.ManagedPolicies, add)
	diffSets("access entry group", a.Source, b.Source, a.AccessEntryGroups, b.AccessEntryGroups, add)

	diffMaps(a, b, "lifecycle hook", "", a.Hooks, b.Hooks, nil, add)
	diffMaps(a, b, "parameter", "", a.Params, b.Params, OnlyInTerraform, add)
	diffMaps(a, b, "alarm", "", a.Alarms, b.Alarms, nil, add)

	var oa, ob []string
	for _, o := range a.Outputs {
		if !OnlyInTerraform[o] {
			oa = append(oa, o)
		}
	}
	for _, o := range b.Outputs {
		if !OnlyInTerraform[o] {
			ob = append(ob, o)
		}
	}
	diffSets("output", a.Source, b.Source, oa, ob, add)
	return out
}

// diffStatements compares the statements by Sid: the same actions, and the
// same resources unless they are conditional on one side.
func diffStatements(a, b *Spec, add func(string, ...any)) {
	bySid := func(s *Spec) map[string]Statement {
		m := map[string]Statement{}
		for _, st := range s.Statements {
			if prev, dup := m[st.Sid]; dup {
				st.Actions = sortedUnique(append(prev.Actions, st.Actions...))
				st.Resources = sortedUnique(append(prev.Resources, st.Resources...))
				st.Conditional = st.Conditional || prev.Conditional
				if st.Condition != prev.Condition {
					st.Condition = prev.Condition + " | " + st.Condition
				}
			}
			m[st.Sid] = st
		}
		return m
	}
	sa, sb := bySid(a), bySid(b)
	for _, sid := range unionKeys(sa, sb) {
		x, inA := sa[sid]
		y, inB := sb[sid]
		switch {
		case OnlyInSAMStatements[sid] && inA != inB:
		case !inA:
			add("IAM statement %q: only in %s", sid, b.Source)
		case !inB:
			add("IAM statement %q: only in %s", sid, a.Source)
		default:
			if strings.Join(x.Actions, ",") != strings.Join(y.Actions, ",") {
				add("IAM statement %q actions: %s=%v %s=%v", sid, a.Source, x.Actions, b.Source, y.Actions)
			}
			if !x.Conditional && !y.Conditional && strings.Join(x.Resources, ",") != strings.Join(y.Resources, ",") {
				add("IAM statement %q resources: %s=%v %s=%v", sid, a.Source, x.Resources, b.Source, y.Resources)
			}
			if x.Condition != y.Condition {
				add("IAM statement %q condition: %s=%s %s=%s", sid, a.Source, x.Condition, b.Source, y.Condition)
			}
		}
	}
}

// UnscopedActions are the actions the function's role may hold on Resource
// "*": those the Service Authorization Reference lists with no resource type
// (so a resource ARN cannot scope them). A Describe* that does have one, such
// as eks:DescribeCluster (cluster), must stay scoped.
var UnscopedActions = map[string]bool{
	"ec2:DescribeInstances":                 true, // no resource types
	"autoscaling:DescribeLifecycleHooks":    true, // no resource types, no condition keys
	"autoscaling:DescribeAutoScalingGroups": true, // no resource types
	"autoscaling:DescribeWarmPool":          true, // no resource types
}

// LeastPrivilegeProblems reports wildcard actions, and Resource "*" on any
// action that is not in UnscopedActions.
func LeastPrivilegeProblems(s *Spec) []string {
	var out []string
	for _, st := range s.Statements {
		for _, a := range st.Actions {
			if strings.Contains(a, "*") || strings.Contains(a, "?") {
				out = append(out, fmt.Sprintf("%s: statement %q: wildcard action %q", s.Source, st.Sid, a))
			}
		}
		for _, r := range st.Resources {
			if r != "*" {
				continue
			}
			for _, a := range st.Actions {
				if !UnscopedActions[a] {
					out = append(out, fmt.Sprintf("%s: statement %q: action %q on Resource \"*\"", s.Source, st.Sid, a))
				}
			}
		}
	}
	if len(s.Statements) == 0 {
		out = append(out, s.Source+": no IAM statements found for the function's role")
	}
	return out
}

func diffStringMaps(what, na, nb string, a, b map[string]string, add func(string, ...any)) {
	for _, k := range unionKeys(a, b) {
		va, inA := a[k]
		vb, inB := b[k]
		switch {
		case !inA:
			add("%s %s: only in %s (%q)", what, k, nb, vb)
		case !inB:
			add("%s %s: only in %s (%q)", what, k, na, va)
		case va != vb:
			add("%s %s: %s=%q %s=%q", what, k, na, va, nb, vb)
		}
	}
}

func diffSets(what, na, nb string, a, b []string, add func(string, ...any)) {
	sa, sb := map[string]bool{}, map[string]bool{}
	for _, x := range a {
		sa[x] = true
	}
	for _, x := range b {
		sb[x] = true
	}
	for _, x := range sortedKeys(sa) {
		if !sb[x] {
			add("%s %s: only in %s", what, x, na)
		}
	}
	for _, x := range sortedKeys(sb) {
		if !sa[x] {
			add("%s %s: only in %s", what, x, nb)
		}
	}
}

// diffMaps compares what a and b hold by name (of a kind what): a name only
// one side has, with its value, and a value that differs (said as "what name
// differ:", e.g. " pattern"); the names in skip are passed over.
func diffMaps[V comparable](a, b *Spec, what, differ string, ma, mb map[string]V, skip map[string]bool, add func(string, ...any)) {
	for _, name := range unionKeys(ma, mb) {
		if skip[name] {
			continue
		}
		va, inA := ma[name]
		vb, inB := mb[name]
		switch {
		case !inA:
			add("%s %s: only in %s: %+v", what, name, b.Source, vb)
		case !inB:
			add("%s %s: only in %s: %+v", what, name, a.Source, va)
		case va != vb:
			add("%s %s%s:\n\t%s: %+v\n\t%s: %+v", what, name, differ, a.Source, va, b.Source, vb)
		}
	}
}

func unionKeys[V any](a, b map[string]V) []string {
	set := map[string]bool{}
	for k := range a {
		set[k] = true
	}
	for k := range b {
		set[k] = true
	}
	return sortedKeys(set)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// SnakeCase turns a CloudFormation parameter or output name into its
// terraform twin: AsgNames -> asg_names, KubeClientQps -> kube_client_qps.
func SnakeCase(name string) string {
	var b strings.Builder
	for i, r := range name {
		upper := r >= 'A' && r <= 'Z'
		if upper && i > 0 {
			prev := name[i-1]
			if (prev >= 'a' && prev <= 'z') || (prev >= '0' && prev <= '9') {
				b.WriteByte('_')
			}
		}
		if upper {
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// canonicalJSON renders v with sorted keys and with every array sorted (an
// event pattern's arrays are sets of alternatives).
func canonicalJSON(v any) (string, error) {
	norm, err := normalize(v)
	if err != nil {
		return "", err
	}
	out, err := json.Marshal(norm)
	return string(out), err
}

func normalize(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			n, err := normalize(x)
			if err != nil {
				return nil, err
			}
			m[k] = n
		}
		return m, nil // encoding/json sorts map keys
	case []any:
		items := make([]any, 0, len(t))
		keys := make([]string, 0, len(t))
		for _, x := range t {
			n, err := normalize(x)
			if err != nil {
				return nil, err
			}
			items = append(items, n)
			k, _ := json.Marshal(n)
			keys = append(keys, string(k))
		}
		idx := make([]int, len(items))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool { return keys[idx[i]] < keys[idx[j]] })
		sorted := make([]any, len(items))
		for i, j := range idx {
			sorted[i] = items[j]
		}
		return sorted, nil
	case string, bool, nil:
		return t, nil
	case int:
		return float64(t), nil
	case float64:
		return t, nil
	default:
		return nil, fmt.Errorf("unexpected value %T in pattern", v)
	}
}

func sortedUnique(xs []string) []string {
	set := map[string]bool{}
	for _, x := range xs {
		set[x] = true
	}
	return sortedKeys(set)
}
