package install

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/node-drainer/node-drainer/internal/logging"
	"github.com/node-drainer/node-drainer/internal/metrics"
	"github.com/node-drainer/node-drainer/test/deploy"
)

// metricsLevels are the log levels metrics_every_level deploys beside the
// default (INFO, terraform_drain's): those at which Lambda's filter, set to
// the chosen level, would drop the metrics line.
var metricsLevels = []string{"WARN", "ERROR"}

// checkMetricsEveryLevel updates the deployment (update: the path's own
// update, returning the function as deployed and the level of Lambda's
// application log-level filter it was given) to each of metricsLevels, then
// drains a node of the scene with the function as deployed (instances
// first, first+1, ...: the others are drained by the path's other steps or
// take the pods) and applies Lambda's application log-level filter
// (internal/logging.LambdaKeeps), at the level the deployed function gives
// it, to the function's real output: the drain's metrics line must be kept.
func checkMetricsEveryLevel(t *testing.T, ctx context.Context, s *drainScene, first int, update func(level string) (fn deployedFunction, filter string)) {
	t.Helper()
	if len(s.Instances) < first+len(metricsLevels) {
		t.Fatalf("the scene has %d instances, want %d", len(s.Instances), first+len(metricsLevels))
	}
	for i, level := range metricsLevels {
		deployed, filter := update(level)
		if t.Failed() {
			return
		}
		if got := deployed.Env["LOG_LEVEL"]; got != level {
			t.Fatalf("log level %s deployed: the function's LOG_LEVEL is %q", level, got)
		}
		out := drainInstance(t, ctx, s, deployed, first+i, "-"+strings.ToLower(level))
		if t.Failed() {
			return
		}
		if err := metricsKept(out, level, filter); err != nil {
			t.Errorf("LOG_LEVEL %s, Lambda's filter at %s: %v", level, filter, err)
		} else {
			t.Logf("LOG_LEVEL %s: the drain's metrics line is kept by Lambda's filter at %s", level, filter)
		}
	}
}

// terraformLevel is terraform's update for checkMetricsEveryLevel: the
// module's log_level set to level and applied; the filter is the function's
// LoggingConfig, or, as the emulator drops it (HARNESS.md), the module's own
// application_log_level, read from the module that was applied.
func terraformLevel(t *testing.T, ctx context.Context, tf *terraformRoot, fn deployedFunction) func(level string) (deployedFunction, string) {
	return func(level string) (deployedFunction, string) {
		t.Helper()
		if err := tf.writeOverride(tfSetup{manageRBAC: tf.manageRBAC, leaseNamespace: deployLeaseNamespace, logLevel: level}); err != nil {
			t.Fatal(err)
		}
		if err := tf.run(ctx, "apply", "-auto-approve", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		f, err := lambda.NewFromConfig(env.AWS.AWSConfig()).GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(fn.Name)})
		if err != nil {
			t.Fatal(err)
		}
		deployed := fn
		deployed.Env = f.Configuration.Environment.Variables
		filter := ""
		if lcfg := f.Configuration.LoggingConfig; lcfg != nil {
			filter = string(lcfg.ApplicationLogLevel)
		}
		if filter == "" {
			spec, err := deploy.LoadTerraform(filepath.Join(tf.work, "terraform"))
			if err != nil {
				t.Fatal(err)
			}
			filter = spec.Function["application_log_level"]
			t.Logf("DROPPED BY THE EMULATOR: the function has no LoggingConfig; the module's application_log_level is %q", filter)
		}
		return deployed, filter
	}
}

// metricsKept applies Lambda's filter at filter to the application lines of
// out (the runtime's platform lines are not application logs): the drain's
// one metrics line (EMF, in the catalog, a completed hook) is kept, every
// log line the function wrote is at level or above it (the function applies
// LOG_LEVEL itself) and kept. It also says the filter at level itself (the
// templates' former configuration) drops the metrics line, so that the
// check stands for something.
func metricsKept(out, level, filter string) error {
	minimum, err := logging.ParseLevel(level)
	if err != nil {
		return err
	}
	var metricLines [][]byte
	for _, l := range bytes.Split([]byte(out), []byte("\n")) {
		l = bytes.TrimSpace(l)
		if len(l) == 0 {
			continue
		}
		var doc map[string]any
		if json.Unmarshal(l, &doc) == nil {
			if typ, _ := doc["type"].(string); strings.HasPrefix(typ, "platform.") {
				continue
			}
			if _, ok := doc["_aws"]; ok {
				metricLines = append(metricLines, l)
				continue
			}
			var got slog.Level
			if lv, _ := doc["level"].(string); got.UnmarshalText([]byte(lv)) != nil || got < minimum {
				return fmt.Errorf("a log line below %s was written: %s", level, l)
			}
		}
		if !logging.LambdaKeeps(l, filter) {
			return fmt.Errorf("a line the function wrote is dropped: %s", l)
		}
	}
	if len(metricLines) != 1 {
		return fmt.Errorf("%d metrics lines, want the drain's one", len(metricLines))
	}
	m := metricLines[0]
	if err := metrics.Validate(m); err != nil {
		return fmt.Errorf("the metrics line is not EMF: %w: %s", err, m)
	}
	if err := metrics.CheckCatalog(m); err != nil {
		return fmt.Errorf("the metrics line leaves the catalog: %w: %s", err, m)
	}
	if !bytes.Contains(m, []byte(`"`+metrics.HooksCompleted+`":1`)) || !bytes.Contains(m, []byte(`"`+metrics.PodsEvicted+`":`)) {
		return fmt.Errorf("the metrics line is not a drain's (no HooksCompleted, PodsEvicted): %s", m)
	}
	if !logging.LambdaKeeps(m, filter) {
		return fmt.Errorf("the drain's metrics line is DROPPED: %s", m)
	}
	if logging.LambdaKeeps(m, level) {
		return fmt.Errorf("the filter at %s itself keeps the metrics line (the check would show nothing): %s", level, m)
	}
	return nil
}

// readDashboards reads the dashboards named names back from the emulator
// (GetDashboard through CloudWatch's query protocol, as the alarms are
// read), as "name-with-<function>: canonical body" with the function's name
// fn replaced by <function>.
func readDashboards(ctx context.Context, fn string, names ...string) ([]string, error) {
	var out []string
	for _, n := range names {
		b, err := env.AWS.Query(ctx, "monitoring", "2010-08-01", url.Values{"Action": {"GetDashboard"}, "DashboardName": {n}})
		if err != nil {
			return nil, fmt.Errorf("GetDashboard %s: %w", n, err)
		}
		var res struct {
			Body string `xml:"GetDashboardResult>DashboardBody"`
		}
		if err := xml.Unmarshal(b, &res); err != nil {
			return nil, fmt.Errorf("GetDashboard %s: %w", n, err)
		}
		var v any
		if err := json.Unmarshal([]byte(res.Body), &v); err != nil {
			return nil, fmt.Errorf("dashboard %s: body is not JSON: %w", n, err)
		}
		out = append(out, strings.ReplaceAll(n+": "+canonJSON(v), fn, "<function>"))
	}
	return out, nil
}
