package install

// The canonical terms both deploy paths fill `created` in, defined once:
// the placeholders for what differs by construction, one JSON encoding, one
// IAM-statement form and one replacer. terraform_test.go and sam_test.go use
// these and nothing of their own, so that deploy_paths_equal compares what
// was created, not how each path spelled it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The placeholders: what a generated name or ARN stands for.
const (
	phFunction = "<function>"              // the function's ARN
	phRole     = "<role>"                  // the function's role's ARN
	phLogGroup = "<log-group>"             // the log group's ARN, without the ":*" of its streams
	phDLQ      = "<dead-letter-queue>"     // the dead-letter queue's ARN
	phDLQURL   = "<dead-letter-queue-url>" // the dead-letter queue's URL
	phRules    = ":rule/<function-name>-"  // the function's rules' names in an ARN (a policy's pattern rule/<function-name>-*)
)

// phASG stands for the i-th listed Auto Scaling group's name.
func phASG(i int) string { return fmt.Sprintf("<asg%d>", i) }

// functionKeys are the keys of created.Function.
var functionKeys = []string{
	"architectures", "async_max_event_age", "async_retry_attempts", "dead_letter",
	"dlq_retention_seconds", "dlq_sse", "handler", "log_retention_days",
	"memory_size", "reserved_concurrency", "runtime", "timeout",
}

// made is what a path made whose names and ARNs differ by construction
// between the paths (generated names, the stack's prefix, the test's ASGs).
type made struct {
	FunctionARN, RoleARN string
	// FunctionName is replaced only where it begins the rules' names in an
	// ARN: the default one, node-drainer, is also the name of the Kubernetes
	// group, the Leases' namespace and the hooks' prefix, which stay.
	FunctionName string
	// LogGroupARN with or without the ":*" DescribeLogGroups' Arn ends in:
	// both forms are replaced, the suffix kept.
	LogGroupARN    string
	DLQARN, DLQURL string
	ASGs           []string // in the order listed to the path
}

// canon replaces what a path made by its placeholder, in strings and in
// decoded JSON values.
type canon struct{ r *strings.Replacer }

func newCanon(m made) canon {
	pairs := map[string]string{}
	add := func(k, v string) {
		if k != "" {
			pairs[k] = v
		}
	}
	add(m.FunctionARN, phFunction)
	if m.FunctionName != "" {
		add(":rule/"+m.FunctionName+"-", phRules)
	}
	add(m.RoleARN, phRole)
	if lg := strings.TrimSuffix(m.LogGroupARN, ":*"); lg != "" {
		add(lg, phLogGroup)
		add(lg+":*", phLogGroup+":*")
	}
	add(m.DLQARN, phDLQ)
	add(m.DLQURL, phDLQURL)
	for i, a := range m.ASGs {
		add(a, phASG(i))
	}
	keys := make([]string, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	// longest first, so an ARN is replaced before a name inside it and
	// "tf-nodes-b" before "tf-nodes"
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) > len(keys[j])
		}
		return keys[i] < keys[j]
	})
	var args []string
	for _, k := range keys {
		args = append(args, k, pairs[k])
	}
	return canon{strings.NewReplacer(args...)}
}

func (c canon) str(s string) string { return c.r.Replace(s) }

// value is v (decoded JSON) with every string replaced.
func (c canon) value(v any) any {
	switch x := v.(type) {
	case string:
		return c.str(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = c.value(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = c.value(e)
		}
		return out
	}
	return v
}

// env is an environment with its values replaced.
func (c canon) env(vars map[string]string) map[string]string {
	out := make(map[string]string, len(vars))
	for k, v := range vars {
		out[k] = c.str(v)
	}
	return out
}

// canonJSON is v as JSON with sorted keys, no spaces and no HTML escaping
// (the placeholders' angle brackets stay as they are).
func canonJSON(v any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return fmt.Sprintf("!(%v)", err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// mustJSON is v indented for the test log, without HTML escaping.
func mustJSON(v any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.SetIndent("", "  ")
	_ = e.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// decodeJSON decodes a JSON document, numbers kept as their text.
func decodeJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// jsonDoc is a JSON document (an event pattern) in canonical JSON, names
// replaced.
func (c canon) jsonDoc(s string) (string, error) {
	v, err := decodeJSON(s)
	if err != nil {
		return "", fmt.Errorf("JSON %q: %w", s, err)
	}
	return canonJSON(c.value(v)), nil
}

// parsePolicy decodes a policy document as IAM answers it: JSON, or JSON
// URL-encoded.
func parsePolicy(doc string) (any, error) {
	v, err := decodeJSON(doc)
	if err == nil {
		return v, nil
	}
	if u, uerr := url.QueryUnescape(doc); uerr == nil {
		if v, uerr := decodeJSON(u); uerr == nil {
			return v, nil
		}
	}
	return nil, err
}

// decodePolicy is parsePolicy, and else the emulator's CloudFormation's
// form of an inline role policy: Python's repr of the document (single
// quotes), read as Python reads it.
func decodePolicy(t *testing.T, doc string) any {
	t.Helper()
	if v, err := parsePolicy(doc); err == nil {
		return v
	}
	cmd := exec.Command("python3", "-c", "import ast,json,sys; json.dump(ast.literal_eval(sys.stdin.read()), sys.stdout)")
	cmd.Stdin = strings.NewReader(doc)
	out, err := cmd.Output()
	if err == nil {
		if v, err := decodeJSON(string(out)); err == nil {
			t.Logf("EMULATOR QUIRK: a policy document came back as a Python literal, not JSON; read as Python reads it")
			return v
		}
	}
	t.Fatalf("policy document %q is neither JSON, URL-encoded JSON nor a Python literal", doc)
	return nil
}

func listOf(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	}
	return []any{v}
}

// statementLists are the statement keys whose value may be a string or a
// list meaning the same.
var statementLists = []string{"Action", "NotAction", "Resource", "NotResource"}

// statements are a decoded policy document's statements, names replaced,
// Action, NotAction, Resource and NotResource as sorted lists without
// duplicates. nulls counts null statements (left out: the emulator's
// CloudFormation keeps a statement that is AWS::NoValue as null,
// CloudFormation drops it).
func (c canon) statements(doc any) (out []map[string]any, nulls int) {
	m, _ := doc.(map[string]any)
	for _, s := range listOf(m["Statement"]) {
		st, ok := c.value(s).(map[string]any)
		if !ok {
			nulls++
			continue
		}
		for _, k := range statementLists {
			if _, has := st[k]; !has {
				continue
			}
			var l []string
			for _, x := range listOf(st[k]) {
				l = append(l, fmt.Sprint(x))
			}
			sort.Strings(l)
			st[k] = slices.Compact(l)
		}
		// Principal {"Service": "x"} and Condition {"Op": {"key": "v"}}: a
		// value and a one-item list mean the same
		if pr, ok := st["Principal"].(map[string]any); ok {
			st["Principal"] = sortedValues(pr)
		}
		if cond, ok := st["Condition"].(map[string]any); ok {
			for op, kv := range cond {
				if m, ok := kv.(map[string]any); ok {
					cond[op] = sortedValues(m)
				}
			}
		}
		out = append(out, st)
	}
	return out, nulls
}

// sortedValues is m with each value a sorted list of strings.
func sortedValues(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		var l []string
		for _, x := range listOf(v) {
			l = append(l, fmt.Sprint(x))
		}
		sort.Strings(l)
		out[k] = slices.Compact(l)
	}
	return out
}

// statementSet is the role's permissions: its statements (from all its
// policies) as canonical JSON, sorted, statements that are equal but for
// their Resource merged into one with the union of the Resources (an Allow
// grants the union either way: terraform lists the ASGs in one statement,
// the template has one role policy per ASG).
func statementSet(sts []map[string]any) []string {
	merged := map[string]map[string]any{}
	for _, st := range sts {
		rest := map[string]any{}
		for k, v := range st {
			if k != "Resource" {
				rest[k] = v
			}
		}
		key := canonJSON(rest)
		if have, ok := merged[key]; ok {
			if res, ok := st["Resource"].([]string); ok {
				prev, _ := have["Resource"].([]string)
				l := append(slices.Clone(prev), res...)
				sort.Strings(l)
				have["Resource"] = slices.Compact(l)
			}
			continue
		}
		cp := map[string]any{}
		for k, v := range st {
			cp[k] = v
		}
		merged[key] = cp
	}
	out := make([]string, 0, len(merged))
	for _, st := range merged {
		out = append(out, canonJSON(st))
	}
	sort.Strings(out)
	return out
}

// schedule is a rule's schedule expression and state.
func schedule(expr, state string) string { return expr + " " + state }

// target is a rule's target: the rule's name without the function's name
// and its dash (both paths name the rules "<function name>-<kind>"), the
// target's ARN and dead-letter queue (replaced), and its retry policy.
func (c canon) target(fnName, rule, arn, deadLetter string, maxAge, maxRetries int32) string {
	return canonJSON(map[string]any{
		"Rule": strings.TrimPrefix(rule, fnName+"-"), "Arn": c.str(arn), "DeadLetter": c.str(deadLetter),
		"MaximumEventAgeInSeconds": maxAge, "MaximumRetryAttempts": maxRetries,
	})
}

// alarm is an alarm's name without the function's name and its dash.
func alarm(fnName, name string) string { return strings.TrimPrefix(name, fnName+"-") }

// addHook adds a lifecycle hook's settings to c.Hooks under its transition;
// the same hook on several ASGs is there once.
func addHook(c *created, transition, defaultResult, heartbeat, name string) {
	for _, s := range []string{"default_result=" + defaultResult, "heartbeat_timeout=" + heartbeat, "name=" + name} {
		if !slices.Contains(c.Hooks[transition], s) {
			c.Hooks[transition] = append(c.Hooks[transition], s)
		}
	}
	sort.Strings(c.Hooks[transition])
}

// checkCreated fails t where c is not in the canonical terms' shape:
// created.Function has exactly functionKeys, lists are sorted.
func checkCreated(t *testing.T, c *created) {
	t.Helper()
	var keys []string
	for k := range c.Function {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !slices.Equal(keys, functionKeys) {
		t.Errorf("created.Function has the keys %v, the canonical terms are %v", keys, functionKeys)
	}
	for name, l := range map[string][]string{"Patterns": c.Patterns, "Schedules": c.Schedules, "Targets": c.Targets,
		"Alarms": c.Alarms, "Statements": c.Statements, "QueuePolicy": c.QueuePolicy, "AccessEntryGroups": c.AccessEntryGroups} {
		if !slices.IsSorted(l) {
			t.Errorf("created.%s is not sorted: %v", name, l)
		}
	}
}

// The canonical terms, unit by unit, on read-backs shaped as each path gets
// them (terraform: IAM's URL-encoded JSON of aws_iam_policy_document, one
// statement for all ASGs; SAM: the emulator's CloudFormation's Python
// literal of the template's policy, one role policy per ASG resolved from
// the template).

const (
	sampleAccount = "arn:aws:%s:us-east-1:123456789012:%s"
)

func sampleARN(service, rest string) string { return fmt.Sprintf(sampleAccount, service, rest) }

func TestCanonReplacer(t *testing.T) {
	lg := sampleARN("logs", "log-group:/aws/lambda/node-drainer")
	c := newCanon(made{
		FunctionARN: sampleARN("lambda", "function:node-drainer"), FunctionName: "node-drainer", RoleARN: "arn:aws:iam::123456789012:role/node-drainer-2026112315",
		LogGroupARN: lg + ":*", DLQARN: sampleARN("sqs", "node-drainer-dlq"),
		DLQURL: "http://localhost:5000/123456789012/node-drainer-dlq", ASGs: []string{"tf-nodes", "tf-nodes-b"},
	})
	for in, want := range map[string]string{
		lg:        "<log-group>",
		lg + ":*": "<log-group>:*",
		sampleARN("lambda", "function:node-drainer:$LATEST"):  "<function>:$LATEST",
		"tf-nodes,tf-nodes-b":                                 "<asg0>,<asg1>",
		"autoScalingGroupName/tf-nodes-b":                     "autoScalingGroupName/<asg1>",
		sampleARN("sqs", "node-drainer-dlq"):                  "<dead-letter-queue>",
		"http://localhost:5000/123456789012/node-drainer-dlq": "<dead-letter-queue-url>",
		sampleARN("events", "rule/node-drainer-*"):            sampleARN("events", "rule/<function-name>-*"),
		"node-drainer":           "node-drainer",
		"node-drainer-terminate": "node-drainer-terminate",
	} {
		if got := c.str(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
	// no HTML escaping, sorted keys, numbers as their text
	got, err := c.jsonDoc(`{"source":["aws.autoscaling"],"detail":{"AutoScalingGroupName":["tf-nodes"],"n":2000000000}}`)
	if want := `{"detail":{"AutoScalingGroupName":["<asg0>"],"n":2000000000},"source":["aws.autoscaling"]}`; err != nil || got != want {
		t.Errorf("jsonDoc: got %s %v, want %s", got, err, want)
	}
}

func TestCanonStatements(t *testing.T) {
	tfDoc := url.QueryEscape(`{"Version":"2012-10-17","Statement":[` +
		`{"Sid":"Logs","Effect":"Allow","Action":["logs:PutLogEvents","logs:CreateLogStream"],"Resource":"arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/node-drainer:*"},` +
		`{"Sid":"LifecycleAction","Effect":"Allow","Action":["autoscaling:RecordLifecycleActionHeartbeat","autoscaling:CompleteLifecycleAction"],"Resource":["arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/tf-nodes-b","arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/tf-nodes"]},` +
		`{"Sid":"DescribeInstances","Effect":"Allow","Action":"ec2:DescribeInstances","Resource":"*"}]}`)
	tf := newCanon(made{LogGroupARN: sampleARN("logs", "log-group:/aws/lambda/node-drainer:*"), ASGs: []string{"tf-nodes", "tf-nodes-b"}})
	tfSts, nulls := tf.statements(decodePolicy(t, tfDoc))
	if nulls != 0 {
		t.Errorf("nulls %d", nulls)
	}

	samInline := `{'Version': '2012-10-17', 'Statement': [{'Sid': 'Logs', 'Effect': 'Allow', 'Action': ['logs:CreateLogStream', 'logs:PutLogEvents'], 'Resource': '` +
		sampleARN("logs", "log-group:/aws/lambda/node-drainer:*") + `'}, {'Sid': 'DescribeInstances', 'Effect': 'Allow', 'Action': 'ec2:DescribeInstances', 'Resource': '*'}, None]}`
	sam := newCanon(made{LogGroupARN: sampleARN("logs", "log-group:/aws/lambda/node-drainer"), ASGs: []string{"sam-nodes-a", "sam-nodes-b"}})
	samSts, nulls := sam.statements(decodePolicy(t, samInline))
	if nulls != 1 {
		t.Errorf("the None statement: nulls %d, want 1", nulls)
	}
	for _, a := range []string{"sam-nodes-a", "sam-nodes-b"} { // the resolved AWS::IAM::RolePolicy of each ASG
		sts, _ := sam.statements(map[string]any{"Version": "2012-10-17", "Statement": []any{map[string]any{
			"Sid": "LifecycleAction", "Effect": "Allow",
			"Action":   []any{"autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"},
			"Resource": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/" + a,
		}}})
		samSts = append(samSts, sts...)
	}
	got, want := statementSet(samSts), statementSet(tfSts)
	if !slices.Equal(got, want) {
		t.Errorf("statements differ:\n%s", strings.Join(pathSides.diffList(want, got), "\n"))
	}
	for _, s := range want {
		if strings.Contains(s, `"Sid":"Logs"`) && !strings.Contains(s, `"Resource":["<log-group>:*"]`) {
			t.Errorf("Logs statement %s: want the log group's streams <log-group>:*", s)
		}
		if strings.Contains(s, `"Sid":"LifecycleAction"`) && !strings.Contains(s, `"Resource":["arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/<asg0>","arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/<asg1>"]`) {
			t.Errorf("LifecycleAction statement %s: want both ASGs in one statement", s)
		}
		if strings.Contains(s, `\u003c`) {
			t.Errorf("HTML-escaped: %s", s)
		}
	}
	// a real difference stays: a statement only one has, a narrower Resource
	narrower, _ := sam.statements(map[string]any{"Statement": map[string]any{"Sid": "Logs", "Effect": "Allow",
		"Action": []any{"logs:CreateLogStream", "logs:PutLogEvents"}, "Resource": sampleARN("logs", "log-group:/aws/lambda/node-drainer")}})
	if d := pathSides.diffList(want, statementSet(narrower)); len(d) == 0 {
		t.Errorf("a Logs statement on <log-group> (no :*) equals one on <log-group>:*")
	}
}

func TestCanonQueuePolicy(t *testing.T) {
	dlq := sampleARN("sqs", "node-drainer-dlq")
	c := newCanon(made{DLQARN: dlq})
	// aws_iam_policy_document's rendering: lists for several values, a
	// string for one
	tf, _ := c.statements(decodePolicy(t, `{"Version":"2012-10-17","Statement":[{"Sid":"EventBridgeRuleDeadLetters","Effect":"Allow",`+
		`"Principal":{"Service":["events.amazonaws.com"]},"Action":"sqs:SendMessage","Resource":"`+dlq+`",`+
		`"Condition":{"ArnLike":{"aws:SourceArn":["arn:aws:events:us-east-1:123456789012:rule/node-drainer-*"]}}}]}`))
	// the template's, resolved
	sam, _ := c.statements(map[string]any{"Version": "2012-10-17", "Statement": []any{map[string]any{
		"Sid": "EventBridgeRuleDeadLetters", "Effect": "Allow", "Principal": map[string]any{"Service": "events.amazonaws.com"},
		"Action": "sqs:SendMessage", "Resource": dlq,
		"Condition": map[string]any{"ArnLike": map[string]any{"aws:SourceArn": "arn:aws:events:us-east-1:123456789012:rule/node-drainer-*"}},
	}}})
	a, b := statementSet(tf), statementSet(sam)
	if !slices.Equal(a, b) {
		t.Errorf("queue policies differ:\n%s", strings.Join(pathSides.diffList(a, b), "\n"))
	}
	if want := `{"Action":["sqs:SendMessage"],"Condition":{"ArnLike":{"aws:SourceArn":["arn:aws:events:us-east-1:123456789012:rule/node-drainer-*"]}},"Effect":"Allow","Principal":{"Service":["events.amazonaws.com"]},"Resource":["<dead-letter-queue>"],"Sid":"EventBridgeRuleDeadLetters"}`; len(a) != 1 || a[0] != want {
		t.Errorf("got %v, want [%s]", a, want)
	}
}
