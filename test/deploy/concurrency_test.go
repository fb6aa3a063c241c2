package deploy

import (
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// minReservedConcurrency is the fewest concurrent executions the function
// needs at once (docs/configuration.md): a drain holds one for its whole
// invocation (up to the 900 s timeout); at its hand-over it invokes its
// continuation (asynchronously, internal/handler graceful.go handOver) before
// it returns, so the two overlap; and the scheduled sweep (every 5 minutes
// by default) holds one more for its budget, acting on the hooks it finds
// inline. With fewer, one of them is throttled behind the others: a
// continuation waits out Lambda's backoff while its hook's heartbeat timeout
// runs, and every other event waits for a 15-minute drain to end.
const minReservedConcurrency = 3

// samParamAccepts says whether CloudFormation takes value for the parameter p
// (its Type, AllowedValues, AllowedPattern, MinValue and MaxValue, as
// CloudFormation checks them before anything is created).
func samParamAccepts(p map[string]any, value string) bool {
	switch fmt.Sprint(p["Type"]) {
	case "Number":
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return false
		}
		if lo, ok := p["MinValue"]; ok && f < toFloat(lo) {
			return false
		}
		if hi, ok := p["MaxValue"]; ok && f > toFloat(hi) {
			return false
		}
	case "String":
		if pat, ok := p["AllowedPattern"].(string); ok {
			re := regexp.MustCompile(pat)
			if re.FindString(value) != value || !re.MatchString(value) {
				return false
			}
		}
	default:
		return false
	}
	if allowed, ok := p["AllowedValues"]; ok {
		for _, a := range asList(allowed) {
			if fmt.Sprint(a) == value {
				return true
			}
		}
		return false
	}
	return true
}

func toFloat(v any) float64 {
	f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
	return f
}

// tfVariableAccepts says whether terraform takes value for the variable
// name of the module in dir: each of its validation conditions holds
// (what `terraform plan` checks); the error messages are returned too.
func tfVariableAccepts(t *testing.T, dir, name string, value cty.Value) (bool, []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no terraform files in %s: %v", dir, err)
	}
	parser := hclparse.NewParser()
	var validations []*hclsyntax.Block
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, diags := parser.ParseHCL(src, path)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		for _, b := range f.Body.(*hclsyntax.Body).Blocks {
			if b.Type != "variable" || b.Labels[0] != name {
				continue
			}
			for _, v := range b.Body.Blocks {
				if v.Type == "validation" {
					validations = append(validations, v)
				}
			}
		}
	}
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{name: value})},
		Functions: tfFunctions(),
	}
	ok := true
	var messages []string
	for _, v := range validations {
		cond, diags := v.Body.Attributes["condition"].Expr.Value(ctx)
		if diags.HasErrors() {
			t.Fatalf("variable %s: condition: %v", name, diags)
		}
		msg, diags := v.Body.Attributes["error_message"].Expr.Value(ctx)
		if diags.HasErrors() {
			t.Fatalf("variable %s: error_message: %v", name, diags)
		}
		messages = append(messages, msg.AsString())
		if cond.IsNull() || !cond.True() {
			ok = false
		}
	}
	return ok, messages
}

// Both templates take an unreserved function (0) or a reservation of at
// least minReservedConcurrency, and refuse every other value: a reservation
// of 1 or 2 starves events while a drain and its continuation run.
func TestReservedConcurrencyFloor(t *testing.T) {
	params, _ := templateParams(t)
	p := params["ReservedConcurrency"]
	if p == nil {
		t.Fatal("template.yaml has no parameter ReservedConcurrency")
	}
	if def := fmt.Sprint(p["Default"]); def != "0" {
		t.Errorf("ReservedConcurrency default %q, want 0 (unreserved)", def)
	}
	want := func(v float64) bool { return v == 0 || (v >= minReservedConcurrency && v == float64(int64(v))) }
	for _, v := range []string{"-1", "0", "1", "2", "3", "4", "10", "50", "1000", "2.5", "3.5"} {
		f, _ := strconv.ParseFloat(v, 64)
		if got := samParamAccepts(p, v); got != want(f) {
			t.Errorf("template.yaml ReservedConcurrency=%s: accepted %v, want %v", v, got, want(f))
		}
		bf, _, err := big.ParseFloat(v, 10, 512, big.ToNearestEven)
		if err != nil {
			t.Fatal(err)
		}
		got, messages := tfVariableAccepts(t, filepath.Join(repoRoot, "terraform"), "reserved_concurrency", cty.NumberVal(bf))
		if got != want(f) {
			t.Errorf("terraform reserved_concurrency=%s: accepted %v, want %v", v, got, want(f))
		}
		if !got && !slices.ContainsFunc(messages, func(m string) bool { return strings.Contains(m, strconv.Itoa(minReservedConcurrency)) }) {
			t.Errorf("terraform reserved_concurrency=%s is refused with %q: none names the minimum, %d", v, messages, minReservedConcurrency)
		}
	}
	// a refused value says why, where the user sees it
	if c, _ := p["ConstraintDescription"].(string); !strings.Contains(c, strconv.Itoa(minReservedConcurrency)) {
		t.Errorf("ReservedConcurrency's ConstraintDescription %q does not name the minimum, %d", c, minReservedConcurrency)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile("`ReservedConcurrency`[^\n]*\\b" + strconv.Itoa(minReservedConcurrency) + "\\b").Match(doc) {
		t.Errorf("docs/configuration.md: no line of ReservedConcurrency names the minimum, %d", minReservedConcurrency)
	}
}
