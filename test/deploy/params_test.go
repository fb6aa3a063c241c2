package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/logging"
)

// templateParams reads template.yaml's parameters and its
// AWS::CloudFormation::Interface.
func templateParams(t *testing.T) (params map[string]map[string]any, iface map[string]any) {
	t.Helper()
	doc, err := templateDoc(filepath.Join(repoRoot, samFile))
	if err != nil {
		t.Fatal(err)
	}
	params = map[string]map[string]any{}
	for name, p := range asMap(doc["Parameters"]) {
		params[name] = asMap(p)
	}
	return params, asMap(asMap(doc["Metadata"])["AWS::CloudFormation::Interface"])
}

// A person deploying the template can answer it: every parameter says what
// it is, has a label and sits in exactly one group, and the first group holds
// exactly the parameters without a default (what must be answered).
func TestParametersAnswerable(t *testing.T) {
	params, iface := templateParams(t)
	var required []string
	for name, p := range params {
		if d, _ := p["Description"].(string); strings.TrimSpace(d) == "" {
			t.Errorf("parameter %s has no Description", name)
		}
		if _, ok := p["Default"]; !ok {
			required = append(required, name)
		}
	}
	sort.Strings(required)
	if !slices.Equal(required, []string{"ClusterName"}) {
		t.Errorf("parameters without a default %v: want ClusterName alone (the node groups: AsgNames, AsgTagKey or both, a Rule checks)", required)
	}
	// the first group: what must be answered, and the node groups' choice
	// (AsgNames, or the tag that selects them, defaulted)
	first := slices.Sorted(slices.Values(append(slices.Clone(required), "AsgNames", "AsgTagKey", "AsgTagValue")))
	groups := asList(iface["ParameterGroups"])
	if len(groups) == 0 {
		t.Fatal("no AWS::CloudFormation::Interface ParameterGroups")
	}
	seen := map[string]string{}
	for i, g := range groups {
		label := fmt.Sprint(asMap(asMap(g)["Label"])["default"])
		var names []string
		for _, n := range asList(asMap(g)["Parameters"]) {
			name := fmt.Sprint(n)
			names = append(names, name)
			if _, ok := params[name]; !ok {
				t.Errorf("group %q lists %s, which is not a parameter", label, name)
			}
			if other, dup := seen[name]; dup {
				t.Errorf("%s is in the groups %q and %q", name, other, label)
			}
			seen[name] = label
		}
		if i == 0 && !slices.Equal(slices.Sorted(slices.Values(names)), first) {
			t.Errorf("first group %q holds %v: want the required parameters and the node groups' choice %v", label, names, first)
		}
	}
	labels := asMap(iface["ParameterLabels"])
	for name := range params {
		if _, ok := seen[name]; !ok {
			t.Errorf("parameter %s is in no ParameterGroup", name)
		}
		if l, _ := asMap(labels[name])["default"].(string); l == "" {
			t.Errorf("parameter %s has no ParameterLabel", name)
		}
	}
	for name := range labels {
		if _, ok := params[name]; !ok {
			t.Errorf("ParameterLabels names %s, which is not a parameter", name)
		}
	}
}

// durationCandidates are values tried against each duration parameter's
// AllowedPattern: whatever the pattern accepts, the configuration must too.
func durationCandidates() []string {
	c := []string{"1ms", "500ms", "99999ms", "1s", "59s", "90s", "100s", "119s", "120s", "121s", "1m", "1m0s", "1m30s", "1m59s", "2m",
		"3m", "15m", "30m", "1h", "1h30m", "1.5h", "0.5h", "2h45m30s", "1h0m0s500ms", "999999h", "999999.999h999999.999m999999.999s999999.999ms",
		"1.001s", "2.5m", "10m0.5s"}
	for _, n := range []string{"0", "1", "7", "10", "60", "120", "600", "000001"} {
		for _, u := range []string{"ms", "s", "m", "h"} {
			c = append(c, n+u)
		}
	}
	return c
}

// badDurations are refused by the pattern and by the configuration alike.
var badDurations = []string{"", "5", "0s", "0m0s", "-5m", "+-1s", "5 m", "5min", "1d", "30M", "1H", "abc", "h", ".s", "1e3s", "9999999999h"}

// Each duration parameter (a variable whose default is a Go duration) has an
// AllowedPattern that accepts nothing the function's configuration refuses:
// a typo is refused by CloudFormation, not by the function at start-up
// (after which every hook times out to its default result).
func TestDurationPatternsAgreeWithConfig(t *testing.T) {
	params, _ := templateParams(t)
	sam, err := LoadSAM(filepath.Join(repoRoot, samFile))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{} // snake_case -> parameter
	for name := range params {
		byName[SnakeCase(name)] = name
	}
	accepts := func(env, v string) error {
		_, err := config.FromEnv(func(k string) string {
			switch k {
			case "CLUSTER_NAME":
				return "prod"
			case env:
				return v
			}
			return ""
		})
		return err
	}
	n := 0
	for _, v := range config.Vars {
		if _, err := time.ParseDuration(v.Default); err != nil {
			continue
		}
		n++
		e, ok := sam.Env[v.Name]
		if !ok || len(e.Params) != 1 {
			t.Errorf("%s: not set from one parameter (%+v)", v.Name, e)
			continue
		}
		param := byName[e.Params[0]]
		t.Run(param, func(t *testing.T) {
			raw, _ := params[param]["AllowedPattern"].(string)
			if raw == "" {
				t.Fatalf("duration parameter %s has no AllowedPattern", param)
			}
			if strings.Contains(raw, "(?") {
				t.Fatalf("AllowedPattern %q uses a group construct; keep to what Java's and Go's regular expressions read alike", raw)
			}
			pattern, err := regexp.Compile(raw)
			if err != nil {
				t.Fatal(err)
			}
			full := func(s string) bool { return pattern.MatchString(s) && pattern.FindString(s) == s }
			if def := fmt.Sprint(params[param]["Default"]); !full(def) {
				t.Errorf("the default %q does not match the pattern", def)
			}
			matched := 0
			for _, c := range durationCandidates() {
				if !full(c) {
					continue
				}
				matched++
				if err := accepts(v.Name, c); err != nil {
					t.Errorf("%s=%q matches the pattern, but the configuration refuses it: %v", v.Name, c, err)
				}
			}
			if matched < 5 {
				t.Errorf("the pattern matches only %d of the candidates: too strict to be useful", matched)
			}
			for _, b := range badDurations {
				if full(b) {
					t.Errorf("the pattern accepts %q", b)
				}
				// empty: the default applies; a zero spelt with a unit, where
				// the default is 0 (LB_DRAIN_WAIT), is 0 to the function too
				zero := v.Default == "0" && (b == "0s" || b == "0m0s")
				if b != "" && !zero && accepts(v.Name, b) == nil {
					t.Errorf("the configuration accepts %s=%q", v.Name, b)
				}
			}
		})
	}
	if n != 13 {
		t.Errorf("%d duration variables in config.Vars, want 13: is the detection still right?", n)
	}
}

// The log levels the templates offer are the ones the function applies.
func TestLogLevelsAgree(t *testing.T) {
	params, _ := templateParams(t)
	var sam []string
	for _, v := range asList(params["LogLevel"]["AllowedValues"]) {
		sam = append(sam, fmt.Sprint(v))
	}
	if !slices.Equal(sam, logging.Levels) {
		t.Errorf("template.yaml LogLevel AllowedValues %v, want %v", sam, logging.Levels)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "terraform", "variables.tf"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`contains\(\[([^\]]*)\], var\.log_level\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("terraform/variables.tf: no validation contains([...], var.log_level)")
	}
	var tf []string
	for _, v := range strings.Split(string(m[1]), ",") {
		tf = append(tf, strings.Trim(strings.TrimSpace(v), `"`))
	}
	if !slices.Equal(tf, logging.Levels) {
		t.Errorf("terraform log_level validation %v, want %v", tf, logging.Levels)
	}
}

// samconfig.toml.example deploys: it answers every required parameter and
// names only parameters the template has.
func TestSamconfigExample(t *testing.T) {
	params, _ := templateParams(t)
	b, err := os.ReadFile(filepath.Join(repoRoot, "samconfig.toml.example"))
	if err != nil {
		t.Fatal(err)
	}
	section := ""
	given := map[string]map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = strings.Trim(line, "[]")
			continue
		}
		rest, ok := strings.CutPrefix(line, "parameter_overrides = ")
		if !ok {
			continue
		}
		given[section] = map[string]bool{}
		for _, kv := range regexp.MustCompile(`([A-Za-z0-9]+)=\\"[^"\\]*\\"`).FindAllStringSubmatch(rest, -1) {
			given[section][kv[1]] = true
			if _, ok := params[kv[1]]; !ok {
				t.Errorf("[%s] sets %s, which is not a parameter of template.yaml", section, kv[1])
			}
		}
	}
	for name, p := range params {
		if _, hasDefault := p["Default"]; !hasDefault && !given["default.deploy.parameters"][name] {
			t.Errorf("[default.deploy.parameters] does not answer the required parameter %s", name)
		}
	}
}

// terraform validates each duration variable with the pattern the template's
// twin parameter has (so a typo fails `terraform plan`, not the function at
// start-up), and refuses what the pattern refuses.
func TestTerraformDurationsValidated(t *testing.T) {
	params, _ := templateParams(t)
	b, err := os.ReadFile(filepath.Join(repoRoot, varsTF))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	n := 0
	for name, p := range params {
		raw, _ := p["AllowedPattern"].(string)
		def := fmt.Sprint(p["Default"])
		if _, err := time.ParseDuration(def); err != nil || raw == "" {
			continue
		}
		if _, err := strconv.ParseFloat(def, 64); err == nil && !regexp.MustCompile(raw).MatchString("1s") {
			continue // "0" parses as a duration too: a number with a pattern (ReservedConcurrency), not LB_DRAIN_WAIT's
		}
		n++
		v := SnakeCase(name)
		start := strings.Index(src, `variable "`+v+`" {`)
		if start < 0 {
			t.Errorf("%s: no terraform variable %s", name, v)
			continue
		}
		block := src[start:]
		if end := strings.Index(block[1:], "\nvariable "); end >= 0 {
			block = block[:end+1]
		}
		m := regexp.MustCompile(`can\(regex\("((?:[^"\\]|\\.)*)", var\.` + v + `\)\)`).FindStringSubmatch(block)
		if m == nil {
			t.Errorf("terraform variable %s has no validation can(regex(\"...\", var.%s))", v, v)
			continue
		}
		if got := strings.ReplaceAll(m[1], `\\`, `\`); got != raw {
			t.Errorf("terraform variable %s validates with\n %s\nthe template's %s with\n %s", v, got, name, raw)
		}
	}
	if n != 13 {
		t.Errorf("%d duration parameters with a pattern in template.yaml, want 13", n)
	}
}
