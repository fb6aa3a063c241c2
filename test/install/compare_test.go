package install

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// comparePaths fails t once for each field of created in which the two
// paths' creations differ, showing only the differing entries.
func comparePaths(t *testing.T, tf, sam *created) {
	t.Helper()
	diffs := diffCreated(pathSides, tf, sam)
	for _, d := range diffs {
		t.Error(d)
	}
	if len(diffs) > 0 && len(sam.FromTemplate) > 0 {
		t.Logf("sam read %s from its transformed template (the emulator skipped or dropped them)", strings.Join(sam.FromTemplate, ", "))
	}
	if len(diffs) > 0 && len(tf.FromTemplate) > 0 {
		t.Logf("terraform took %s from its description", strings.Join(tf.FromTemplate, ", "))
	}
}

// diffCreated describes each field in which a and b (n names them: which
// path or deployment each is) differ: for lists the entries only one has
// (as multisets), for maps the keys only one has and the keys whose values
// differ.
func diffCreated(n sides, ac, bc *created) []string {
	a, b := reflect.ValueOf(*ac), reflect.ValueOf(*bc)
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if f.Tag.Get("compare") == "-" {
			continue
		}
		var lines []string
		switch x := a.Field(i).Interface().(type) {
		case []string:
			lines = n.diffList(x, b.Field(i).Interface().([]string))
		case map[string]string:
			lines = n.diffMap(x, b.Field(i).Interface().(map[string]string))
		case map[string][]string:
			lines = n.diffListMap(x, b.Field(i).Interface().(map[string][]string))
		default:
			if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
				lines = []string{n.pad(n.a) + " " + fmt.Sprint(a.Field(i).Interface()), n.pad(n.b) + " " + fmt.Sprint(b.Field(i).Interface())}
			}
		}
		if len(lines) > 0 {
			out = append(out, f.Name+" differ:\n  "+strings.Join(lines, "\n  "))
		}
	}
	return out
}

// sides names the two sides of a comparison in its lines.
type sides struct{ a, b string }

// pathSides are deploy_paths_equal's.
var pathSides = sides{"terraform", "sam"}

// pad is one side's name padded to the longer one's width.
func (n sides) pad(side string) string { return fmt.Sprintf("%-*s", max(len(n.a), len(n.b)), side) }

// only begins the line of an entry only one side has ("only sam:       ").
func (n sides) only(side string) string {
	return fmt.Sprintf("only %-*s", max(len(n.a), len(n.b))+2, side+":")
}

// diffList lists the entries of a not in b and of b not in a, counting
// repeats.
func (n sides) diffList(a, b []string) []string {
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	var onlyA, onlyB []string
	for s, n := range count {
		for ; n > 0; n-- {
			onlyA = append(onlyA, s)
		}
		for ; n < 0; n++ {
			onlyB = append(onlyB, s)
		}
	}
	sort.Strings(onlyA)
	sort.Strings(onlyB)
	var lines []string
	for _, s := range onlyA {
		lines = append(lines, n.only(n.a)+s)
	}
	for _, s := range onlyB {
		lines = append(lines, n.only(n.b)+s)
	}
	return lines
}

func (n sides) diffMap(a, b map[string]string) []string {
	var lines []string
	for _, k := range unionKeys(a, b) {
		va, inA := a[k]
		vb, inB := b[k]
		switch {
		case !inB:
			lines = append(lines, fmt.Sprintf("%s: %s%q", k, n.only(n.a), va))
		case !inA:
			lines = append(lines, fmt.Sprintf("%s: %s%q", k, n.only(n.b), vb))
		case va != vb:
			lines = append(lines, fmt.Sprintf("%s: %s %q, %s %q", k, n.a, va, n.b, vb))
		}
	}
	return lines
}

func (n sides) diffListMap(a, b map[string][]string) []string {
	var lines []string
	for _, k := range unionKeys(a, b) {
		va, inA := a[k]
		vb, inB := b[k]
		switch {
		case !inB:
			lines = append(lines, fmt.Sprintf("%s: %s%v", k, n.only(n.a), va))
		case !inA:
			lines = append(lines, fmt.Sprintf("%s: %s%v", k, n.only(n.b), vb))
		default:
			for _, l := range n.diffList(va, vb) {
				lines = append(lines, k+": "+l)
			}
		}
	}
	return lines
}

func unionKeys[V any](a, b map[string]V) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// samplePaths builds what each path would fill created with from the same
// deployment read back its way (see terraform_test.go's readBack and
// sam_test.go's read*): generated names differ, the ASGs are the paths'
// own, terraform's log group ARN ends in ":*", the emulator's LogGroupArn
// does not.
func samplePaths(t *testing.T) (tf, sam *created) {
	t.Helper()
	one := func(fnARN, roleARN, lgARN, dlqURL string, asgs []string, schedState string) *created {
		c := &created{Function: map[string]string{}, Hooks: map[string][]string{}}
		dlq := sampleARN("sqs", "node-drainer-dlq")
		cn := newCanon(made{FunctionARN: fnARN, RoleARN: roleARN, LogGroupARN: lgARN, DLQARN: dlq, DLQURL: dlqURL, ASGs: asgs})
		for k, v := range map[string]string{"runtime": "provided.al2023", "architectures": "arm64", "handler": "bootstrap",
			"timeout": "900", "memory_size": "256", "reserved_concurrency": "none", "async_retry_attempts": "2",
			"async_max_event_age": "3600", "dlq_retention_seconds": "1209600", "dlq_sse": "true", "log_retention_days": "30"} {
			c.Function[k] = v
		}
		c.Function["dead_letter"] = cn.str(dlq)
		c.Env = cn.env(map[string]string{"ASG_NAMES": strings.Join(asgs, ","), "CLUSTER_NAME": "harness", "DLQ_URL": dlqURL})
		p, err := cn.jsonDoc(`{"source":["aws.autoscaling"],"detail-type":["EC2 Instance-terminate Lifecycle Action"],"detail":{"AutoScalingGroupName":["` + strings.Join(asgs, `","`) + `"]}}`)
		if err != nil {
			t.Fatal(err)
		}
		c.Patterns = []string{p}
		c.Schedules = []string{schedule("rate(5 minutes)", schedState)}
		c.Targets = []string{cn.target("node-drainer", "node-drainer-terminate-hook", fnARN, dlq, 3600, 2)}
		for _, a := range []string{"node-drainer-errors", "node-drainer-dlq-not-empty"} {
			c.Alarms = append(c.Alarms, alarm("node-drainer", a))
		}
		sort.Strings(c.Alarms)
		var sts []map[string]any
		for _, a := range asgs {
			s, _ := cn.statements(map[string]any{"Statement": map[string]any{"Sid": "LifecycleAction", "Effect": "Allow",
				"Action": "autoscaling:CompleteLifecycleAction", "Resource": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/" + a}})
			sts = append(sts, s...)
		}
		s, _ := cn.statements(map[string]any{"Statement": []any{map[string]any{"Sid": "Logs", "Effect": "Allow",
			"Action": []any{"logs:PutLogEvents", "logs:CreateLogStream"}, "Resource": strings.TrimSuffix(lgARN, ":*") + ":*"}}})
		c.Statements = statementSet(append(sts, s...))
		for _, a := range asgs {
			_ = a // the same hook on each ASG
			addHook(c, "autoscaling:EC2_INSTANCE_TERMINATING", "CONTINUE", "300", "node-drainer-terminate")
		}
		c.AccessEntryGroups = []string{"node-drainer"}
		checkCreated(t, c)
		return c
	}
	tf = one(sampleARN("lambda", "function:node-drainer"), "arn:aws:iam::123456789012:role/node-drainer-20261123152600000000001",
		sampleARN("logs", "log-group:/aws/lambda/node-drainer:*"), "http://localhost:5000/123456789012/node-drainer-dlq",
		[]string{"tf-nodes", "tf-nodes-b"}, "ENABLED")
	sam = one(sampleARN("lambda", "function:node-drainer"), "arn:aws:iam::123456789012:role/node-drainer-FunctionRole-A1B2C3D4",
		sampleARN("logs", "log-group:/aws/lambda/node-drainer"), "http://sqs.us-east-1.localhost:5000/123456789012/node-drainer-dlq",
		[]string{"sam-nodes-a", "sam-nodes-b"}, "ENABLED")
	sam.FromTemplate = []string{"AWS::CloudWatch::Alarm"}
	return tf, sam
}

func TestComparePathsEqual(t *testing.T) {
	tf, sam := samplePaths(t)
	if d := diffCreated(pathSides, tf, sam); len(d) > 0 {
		t.Errorf("the same deployment read back by the two paths differs:\n%s", strings.Join(d, "\n"))
	}
}

func TestComparePathsShowsOnlyDifferences(t *testing.T) {
	tf, sam := samplePaths(t)
	sam.Function["memory_size"] = "512"
	delete(sam.Function, "dlq_sse")
	sam.Env["EXTRA"] = "1"
	sam.Alarms = append(sam.Alarms, "throttles")
	sam.Schedules = []string{schedule("rate(5 minutes)", "DISABLED")}
	sam.Hooks["autoscaling:EC2_INSTANCE_LAUNCHING"] = []string{"name=launch"}
	tf.Hooks["autoscaling:EC2_INSTANCE_TERMINATING"] = []string{"default_result=ABANDON", "heartbeat_timeout=300", "name=node-drainer-terminate"}
	got := strings.Join(diffCreated(pathSides, tf, sam), "\n")
	want := strings.Join([]string{
		"Function differ:",
		`  dlq_sse: only terraform: "true"`,
		`  memory_size: terraform "256", sam "512"`,
		"Env differ:",
		`  EXTRA: only sam:       "1"`,
		"Schedules differ:",
		"  only terraform: rate(5 minutes) ENABLED",
		"  only sam:       rate(5 minutes) DISABLED",
		"Alarms differ:",
		"  only sam:       throttles",
		"Hooks differ:",
		"  autoscaling:EC2_INSTANCE_LAUNCHING: only sam:       [name=launch]",
		"  autoscaling:EC2_INSTANCE_TERMINATING: only terraform: default_result=ABANDON",
		"  autoscaling:EC2_INSTANCE_TERMINATING: only sam:       default_result=CONTINUE",
	}, "\n")
	if got != want {
		t.Errorf("diff:\n%s\nwant:\n%s", got, want)
	}
}
