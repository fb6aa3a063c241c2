package deploy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Dashboard is one CloudWatch dashboard of a description, resolved as the
// rest of Spec is (parameters at their defaults, markers for what only
// deployment knows).
type Dashboard struct {
	Name string
	// Body is the dashboard body as canonical JSON.
	Body string
	// Created says whether a default deployment creates it (its SAM
	// Condition, its terraform count).
	Created bool
}

// SAMDashboards reads the AWS::CloudWatch::Dashboard resources of the SAM
// template at path, by logical id.
func SAMDashboards(path string) (map[string]Dashboard, error) {
	top, err := templateDoc(path)
	if err != nil {
		return nil, err
	}
	t, err := newCfnTemplate(top)
	if err != nil {
		return nil, err
	}
	out := map[string]Dashboard{}
	for _, res := range t.ofType("AWS::CloudWatch::Dashboard") {
		r := t.resolver(res)
		d := Dashboard{Name: stringify(r.resolve(res.props["DashboardName"])), Created: true}
		if cond, ok := res.body["Condition"].(string); ok {
			d.Created = r.condition(map[string]any{"Condition": cond})
		}
		if d.Body, err = canonicalBody(stringify(r.resolve(res.props["DashboardBody"]))); err != nil {
			return nil, fmt.Errorf("%s: dashboard %s: %w", path, res.id, err)
		}
		out[res.id] = d
	}
	return out, nil
}

// TerraformDashboards reads the aws_cloudwatch_dashboard resources of the
// terraform module in dir, by resource name.
func TerraformDashboards(dir string) (map[string]Dashboard, error) {
	m, err := parseModule(dir)
	if err != nil {
		return nil, err
	}
	m.evalLocals()
	out := map[string]Dashboard{}
	for _, b := range m.resources("aws_cloudwatch_dashboard") {
		insts, err := m.instances(b)
		if err != nil {
			return nil, err
		}
		d := Dashboard{Created: len(insts) > 0}
		// the body does not depend on count.index: a dashboard not created
		// by default is still read
		name, err := m.eval(b.body, "dashboard_name", nil)
		if err != nil {
			return nil, fmt.Errorf("%s: aws_cloudwatch_dashboard.%s: %w", filepath.Base(dir), b.name, err)
		}
		body, err := m.eval(b.body, "dashboard_body", nil)
		if err != nil {
			return nil, fmt.Errorf("%s: aws_cloudwatch_dashboard.%s: %w", filepath.Base(dir), b.name, err)
		}
		d.Name = tfString(name)
		if d.Body, err = canonicalBody(tfString(body)); err != nil {
			return nil, fmt.Errorf("aws_cloudwatch_dashboard.%s: %w", b.name, err)
		}
		out[b.name] = d
	}
	return out, nil
}

func canonicalBody(body string) (string, error) {
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return "", fmt.Errorf("body is not JSON: %w", err)
	}
	return canonicalJSON(v)
}

// MetricRef is one metric a dashboard widget reads.
type MetricRef struct {
	Widget    string // the widget's title
	Namespace string
	Metric    string
	// Dimensions are the dimension names: a SEARCH's schema, or an explicit
	// metric's names.
	Dimensions []string
	// Filter holds the dimension values asked for (a SEARCH's Name="value"
	// terms, an explicit metric's values).
	Filter map[string]string
	Stat   string
}

// LogQuery is one Logs Insights widget's query.
type LogQuery struct{ Widget, Query string }

// searchExpr is the one form of metric expression the dashboards use: a
// SEARCH over one metric with an exact schema (namespace and dimension
// names) and name="value" terms, a statistic and a period. Anything else in
// a dashboard is refused, so that no metric escapes the checks.
var (
	searchExpr = regexp.MustCompile(`^SEARCH\('\{([A-Za-z0-9/_.-]+(?:,[A-Za-z0-9_.-]+)*)\}((?: [A-Za-z0-9_.-]+="[^"]*")+)', '([A-Za-z0-9.]+)', ([0-9]+)\)$`)
	searchTerm = regexp.MustCompile(` ([A-Za-z0-9_.-]+)="([^"]*)"`)
)

// DashboardMetrics lists every metric and log query a dashboard body (JSON)
// reads; an entry it cannot read is an error.
func DashboardMetrics(body string) ([]MetricRef, []LogQuery, error) {
	var doc struct {
		Widgets []struct {
			Type       string
			Properties struct {
				Title   string
				Query   string
				Metrics [][]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		return nil, nil, err
	}
	var refs []MetricRef
	var logs []LogQuery
	for _, w := range doc.Widgets {
		title := w.Properties.Title
		switch w.Type {
		case "log":
			logs = append(logs, LogQuery{Widget: title, Query: w.Properties.Query})
			continue
		case "metric":
		default:
			return nil, nil, fmt.Errorf("widget %q: type %q", title, w.Type)
		}
		if len(w.Properties.Metrics) == 0 {
			return nil, nil, fmt.Errorf("widget %q: no metrics", title)
		}
		for _, entry := range w.Properties.Metrics {
			ref, err := metricEntry(entry)
			if err != nil {
				return nil, nil, fmt.Errorf("widget %q: %w", title, err)
			}
			ref.Widget = title
			refs = append(refs, ref)
		}
	}
	return refs, logs, nil
}

// metricEntry reads one entry of a metric widget's "metrics": [{expression}]
// or [namespace, name, dim, value, ..., {options}].
func metricEntry(entry []any) (MetricRef, error) {
	if len(entry) == 1 {
		opts, _ := entry[0].(map[string]any)
		expr, _ := opts["expression"].(string)
		m := searchExpr.FindStringSubmatch(expr)
		if m == nil {
			return MetricRef{}, fmt.Errorf("expression %q is not SEARCH('{schema} MetricName=\"...\" ...', 'stat', period)", expr)
		}
		schema := strings.Split(m[1], ",")
		ref := MetricRef{Namespace: schema[0], Dimensions: schema[1:], Filter: map[string]string{}, Stat: m[3]}
		for _, t := range searchTerm.FindAllStringSubmatch(m[2], -1) {
			if t[1] == "MetricName" {
				ref.Metric = t[2]
				continue
			}
			ref.Filter[t[1]] = t[2]
		}
		if ref.Metric == "" {
			return MetricRef{}, fmt.Errorf("expression %q names no MetricName", expr)
		}
		return ref, nil
	}
	var strs []string
	ref := MetricRef{Filter: map[string]string{}, Stat: "Average"}
	for i, v := range entry {
		switch x := v.(type) {
		case string:
			strs = append(strs, x)
		case map[string]any:
			if i != len(entry)-1 {
				return MetricRef{}, fmt.Errorf("metric %v: options before the end", entry)
			}
			if s, ok := x["stat"].(string); ok {
				ref.Stat = s
			}
		default:
			return MetricRef{}, fmt.Errorf("metric %v: %T", entry, v)
		}
	}
	if len(strs) < 2 || len(strs)%2 != 0 || slices.Contains(strs, "...") || slices.Contains(strs, ".") {
		return MetricRef{}, fmt.Errorf("metric %v: want namespace, name, then dimension name/value pairs (no shorthand)", entry)
	}
	ref.Namespace, ref.Metric = strs[0], strs[1]
	for i := 2; i < len(strs); i += 2 {
		ref.Dimensions = append(ref.Dimensions, strs[i])
		ref.Filter[strs[i]] = strs[i+1]
	}
	sort.Strings(ref.Dimensions)
	return ref, nil
}
