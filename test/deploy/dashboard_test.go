package deploy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/metrics"
)

// What the dashboard must show (issue 30): hooks completed by result, drain
// time at p50/p95/max, pods evicted and the wait on PDBs, volume releases,
// every sweep finding, errors; as metric and statistic.
var wantDashboardShows = []string{
	"NodeDrainer/HooksCompleted by FunctionName,LifecycleResult: Sum",
	"NodeDrainer/DrainSeconds by Event,FunctionName,Result: p50",
	"NodeDrainer/DrainSeconds by Event,FunctionName,Result: p95",
	"NodeDrainer/DrainSeconds by Event,FunctionName,Result: Maximum",
	"NodeDrainer/PodsEvicted by Event,FunctionName,Result: Sum",
	"NodeDrainer/PDBBlockedSeconds by Event,FunctionName,Result: Sum",
	"NodeDrainer/RWOForceReleases by Event,FunctionName,Result: Sum",
	"NodeDrainer/SweepHooks by Event,FunctionName,Result: Sum",
	"NodeDrainer/SweepDeadNodes by Event,FunctionName,Result: Sum",
	"NodeDrainer/SweepUnmarked by Event,FunctionName,Result: Sum",
	"NodeDrainer/SweepOrphans by Event,FunctionName,Result: Sum",
	"NodeDrainer/SweepZombies by Event,FunctionName,Result: Sum",
	"NodeDrainer/SweepReplaced by Event,FunctionName,Result: Sum",
	"NodeDrainer/SweepFailed by Event,FunctionName,Result: Sum",
	"AWS/Lambda/Errors by FunctionName: Sum",
}

// lambdaMetrics are the metrics Lambda itself publishes for the function
// (namespace AWS/Lambda, dimension FunctionName) that a dashboard may show
// beside the function's own.
var lambdaMetrics = []string{"Errors", "Throttles", "Invocations", "Duration"}

// dimensionValues are the values a dashboard may ask of a dimension other
// than FunctionName: those the handler writes.
var dimensionValues = map[string][]string{
	metrics.DimResult: {
		string(handler.ActionIgnored), string(handler.ActionDrained), string(handler.ActionUnfinished), string(handler.ActionCordoned), string(handler.ActionReleased),
		string(handler.ActionNotForced), string(handler.ActionRecovered), string(handler.ActionContinued), string(handler.ActionCompleted),
		string(handler.ActionFailed), string(handler.ActionNoNode), string(handler.ActionNodeJoined), string(handler.ActionUnmarked),
		string(handler.ActionFannedOut), string(handler.ActionPerInstance), string(handler.ActionSwept), string(handler.ActionLeftAlone), "dry-run",
	},
	metrics.DimLifecycleResult: {"CONTINUE", "ABANDON"},
}

// dashboardProblems checks a dashboard body: every metric it reads is one
// the function writes (internal/metrics' catalog: name, exact dimension set,
// the values the handler writes) or one Lambda publishes for the function,
// of the function fn; the log widgets read the function's log group.
func dashboardProblems(body, fn string) (shows []string, problems []string) {
	refs, logs, err := DashboardMetrics(body)
	if err != nil {
		return nil, []string{err.Error()}
	}
	add := func(r MetricRef, format string, args ...any) {
		problems = append(problems, "widget "+r.Widget+": "+r.Namespace+"/"+r.Metric+": "+fmt.Sprintf(format, args...))
	}
	for _, r := range refs {
		shows = append(shows, r.Namespace+"/"+r.Metric+" by "+strings.Join(sortedCopy(r.Dimensions), ",")+": "+r.Stat)
		if r.Filter[metrics.DimFunctionName] != fn {
			add(r, "FunctionName %q, want the function's %q", r.Filter[metrics.DimFunctionName], fn)
		}
		for dim, v := range r.Filter {
			if !slices.Contains(r.Dimensions, dim) {
				add(r, "asks %s=%q, not a dimension of its schema %v", dim, v, r.Dimensions)
			}
			if vals, ok := dimensionValues[dim]; ok && !slices.Contains(vals, v) {
				add(r, "asks %s=%q, a value the function never writes (%v)", dim, v, vals)
			}
		}
		switch r.Namespace {
		case metrics.Namespace:
			m, ok := metrics.Lookup(r.Metric)
			if !ok || m.Prefix {
				add(r, "not a metric the function writes (internal/metrics.Catalog)")
				continue
			}
			if !m.HasDimensions(r.Dimensions) {
				add(r, "dimensions %v: the function writes it with %v only (a SEARCH matches the exact set)", r.Dimensions, m.DimensionSets)
			}
		case "AWS/Lambda":
			if !slices.Contains(lambdaMetrics, r.Metric) || !slices.Equal(r.Dimensions, []string{metrics.DimFunctionName}) {
				add(r, "not one of Lambda's metrics %v by FunctionName", lambdaMetrics)
			}
		default:
			add(r, "namespace %s: neither the function's (%s) nor Lambda's", r.Namespace, metrics.Namespace)
		}
	}
	for _, l := range logs {
		if !strings.HasPrefix(l.Query, "SOURCE '/aws/lambda/"+fn+"' |") {
			problems = append(problems, "log widget "+l.Widget+": query does not read the function's log group /aws/lambda/"+fn+": "+l.Query)
		}
	}
	return shows, problems
}

func sortedCopy(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// dashboardErrors checks the dashboards of the descriptions under root:
// both ship the same one (parity, body for body), created by default and
// named after the function, reading only metrics the function really
// writes, and showing what an operator looks for.
func dashboardErrors(root string) []string {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	sams, err := SAMDashboards(filepath.Join(root, "template.yaml"))
	if err != nil {
		return []string{err.Error()}
	}
	tfs, err := TerraformDashboards(filepath.Join(root, "terraform"))
	if err != nil {
		return []string{err.Error()}
	}
	if len(sams) != 1 || len(tfs) != 1 {
		return []string{fmt.Sprintf("want one dashboard in each description: SAM %v, terraform %v", sortedKeys(sams), sortedKeys(tfs))}
	}
	var sam, tf Dashboard
	for _, d := range sams {
		sam = d
	}
	for _, d := range tfs {
		tf = d
	}
	if sam.Body != tf.Body {
		add("the dashboards differ:\n  sam:       %s\n  terraform: %s", sam.Body, tf.Body)
	}
	const fn = "node-drainer" // the function name's default
	for _, side := range []struct {
		name string
		d    Dashboard
	}{{"sam", sam}, {"terraform", tf}} {
		d := side.d
		if d.Name != fn || !d.Created {
			add("%s: dashboard %q, created by default %t: want %q, created", side.name, d.Name, d.Created, fn)
		}
		shows, problems := dashboardProblems(d.Body, fn)
		for _, p := range problems {
			add("%s: %s", side.name, p)
		}
		for _, want := range wantDashboardShows {
			if !slices.Contains(shows, want) {
				add("%s: the dashboard does not show %s (it shows %v)", side.name, want, shows)
			}
		}
		if !strings.Contains(d.Body, `"region":"${aws:region}"`) {
			add("%s: widgets not in the deployment's region", side.name)
		}
	}
	return errs
}

func TestDashboard(t *testing.T) {
	for _, e := range dashboardErrors(repoRoot) {
		t.Error(e)
	}
	sSpec, tSpec := load(t, repoRoot)
	for _, s := range []*Spec{sSpec, tSpec} {
		if p, ok := s.Params["create_dashboard"]; !ok || p.Default != "true" {
			t.Errorf("%s: parameter create_dashboard = %+v, %t: want it, true by default", s.Source, p, ok)
		}
	}
}

// The checks fail when a dashboard names what the function does not write,
// or when one side alone changes.
func TestDashboardDetects(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"unknown metric in SAM", samFile, `MetricName=\"DrainSeconds\" FunctionName=\"${FunctionName}\"', 'p95'`,
			`MetricName=\"DrainTime\" FunctionName=\"${FunctionName}\"', 'p95'`, "NodeDrainer/DrainTime: not a metric the function writes"},
		{"dimension set the function does not write, terraform", dashboardTF, `{NodeDrainer,FunctionName,Event,Result} MetricName=\"PodsEvicted\"`,
			`{NodeDrainer,FunctionName,Result} MetricName=\"PodsEvicted\"`, "NodeDrainer/PodsEvicted: dimensions [FunctionName Result]"},
		{"a result never written, terraform", dashboardTF, `Result=\"failed\"`, `Result=\"error\"`, `asks Result="error", a value the function never writes`},
		{"another namespace in SAM", samFile, `["AWS/Lambda", "Errors"`, `["AWS/SQS", "Errors"`, "namespace AWS/SQS"},
		{"prefix family named bare, terraform", dashboardTF, `MetricName=\"KubeAPIRetries\"`, `MetricName=\"KubeAPIRetries.\"`, "not a metric the function writes"},
		{"sweep finding dropped in SAM", samFile, `MetricName=\"SweepZombies\"`, `MetricName=\"SweepOrphans\"`, "does not show NodeDrainer/SweepZombies"},
		{"widget only in terraform", dashboardTF, `"title": "Pods evicted"`, `"title": "Pods evicted!"`, "the dashboards differ"},
		{"logs of another group in SAM", samFile, `SOURCE '/aws/lambda/${FunctionName}'`, `SOURCE '/aws/lambda/other'`, "does not read the function's log group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t)
			mutate(t, root, tc.file, tc.old, tc.new)
			joined := strings.Join(dashboardErrors(root), "\n")
			if !strings.Contains(joined, tc.want) {
				t.Errorf("after the change, the errors do not mention %q:\n%s", tc.want, joined)
			}
		})
	}
}

// dashboardTF is the terraform module's dashboard body (template.yaml's is
// written from it by hack/dashboard; here the two are changed apart).
const dashboardTF = "terraform/dashboard.json.tftpl"

// The alarms on the function's own metrics name them as the function writes
// them: a metric of the catalog, with exactly one of its dimension sets.
func TestAlarmsNameCatalogMetrics(t *testing.T) {
	sam, tf := load(t, repoRoot)
	n := 0
	for _, s := range []*Spec{sam, tf} {
		for name, a := range s.Alarms {
			if a.Namespace != metrics.Namespace {
				continue
			}
			n++
			var dims []string
			for _, kv := range strings.Split(a.Dimensions, ",") {
				k, _, _ := strings.Cut(kv, "=")
				dims = append(dims, k)
			}
			m, ok := metrics.Lookup(a.Metric)
			switch {
			case !ok || m.Prefix:
				t.Errorf("%s: alarm %s: %s is not a metric the function writes", s.Source, name, a.Metric)
			case !m.HasDimensions(dims):
				t.Errorf("%s: alarm %s: %s by %v, the function writes it by %v only", s.Source, name, a.Metric, dims, m.DimensionSets)
			}
		}
	}
	if n == 0 {
		t.Error("no alarm on the function's own metrics")
	}
}
