package deploy

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// LoadTerraform reads the terraform module in dir (its *.tf files, not its
// subdirectories) into a Spec. Expressions are evaluated with the variables'
// defaults and the functions the module uses; provider-computed values stay
// unknown.
func LoadTerraform(dir string) (*Spec, error) {
	m, err := parseModule(dir)
	if err != nil {
		return nil, err
	}
	s, err := m.spec()
	if err != nil {
		return nil, fmt.Errorf("terraform module %s: %w", dir, err)
	}
	return s, nil
}

type tfVar struct {
	typ        cty.Type
	def        cty.Value
	hasDefault bool
}

type tfBlock struct {
	kind string // resource or data
	typ  string
	name string
	body *hclsyntax.Body
}

type tfModule struct {
	vars      map[string]tfVar
	locals    map[string]hcl.Expression
	localVals map[string]cty.Value
	blocks    []*tfBlock
	outputs   []string
	funcs     map[string]function.Function
}

func parseModule(dir string) (*tfModule, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.tf files in %s", dir)
	}
	sort.Strings(files)
	m := &tfModule{
		vars:      map[string]tfVar{},
		locals:    map[string]hcl.Expression{},
		localVals: map[string]cty.Value{},
		funcs:     tfFunctions(),
	}
	m.funcs["templatefile"] = templateFileFunc(dir)
	parser := hclparse.NewParser()
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, diags := parser.ParseHCL(src, path)
		if diags.HasErrors() {
			return nil, fmt.Errorf("parsing %s: %w", path, diags)
		}
		body, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			return nil, fmt.Errorf("%s: not native HCL syntax", path)
		}
		for _, b := range body.Blocks {
			switch b.Type {
			case "variable":
				v, err := parseVariable(b)
				if err != nil {
					return nil, err
				}
				m.vars[b.Labels[0]] = v
			case "locals":
				for name, attr := range b.Body.Attributes {
					m.locals[name] = attr.Expr
				}
			case "resource", "data":
				m.blocks = append(m.blocks, &tfBlock{kind: b.Type, typ: b.Labels[0], name: b.Labels[1], body: b.Body})
			case "output":
				m.outputs = append(m.outputs, b.Labels[0])
			}
		}
	}
	m.evalLocals()
	return m, nil
}

func parseVariable(b *hclsyntax.Block) (tfVar, error) {
	name := b.Labels[0]
	v := tfVar{typ: cty.DynamicPseudoType}
	if attr, ok := b.Body.Attributes["type"]; ok {
		ty, diags := typeexpr.TypeConstraint(attr.Expr)
		if diags.HasErrors() {
			return v, fmt.Errorf("variable %s type: %w", name, diags)
		}
		v.typ = ty
	}
	attr, ok := b.Body.Attributes["default"]
	if !ok {
		// Required: stands for itself, with the declared type's shape.
		marker := cty.StringVal(paramMarker(name))
		switch {
		case v.typ == cty.String || v.typ == cty.DynamicPseudoType:
			v.def = marker
		case (v.typ.IsListType() || v.typ.IsSetType()) && v.typ.ElementType() == cty.String:
			v.def = cty.ListVal([]cty.Value{marker})
		default:
			v.def = cty.UnknownVal(v.typ)
		}
		return v, nil
	}
	def, diags := attr.Expr.Value(nil)
	if diags.HasErrors() {
		return v, fmt.Errorf("variable %s default: %w", name, diags)
	}
	if v.typ != cty.DynamicPseudoType {
		conv, err := convert.Convert(def, v.typ)
		if err != nil {
			return v, fmt.Errorf("variable %s default: %w", name, err)
		}
		def = conv
	}
	v.def, v.hasDefault = def, true
	return v, nil
}

// evalLocals evaluates the locals in as many passes as there are locals, so
// that every chain of local-to-local references settles; a local that cannot
// be evaluated (provider functions, file reads) stays unknown.
func (m *tfModule) evalLocals() {
	for name := range m.locals {
		m.localVals[name] = cty.DynamicVal
	}
	for range len(m.locals) + 1 {
		for name, expr := range m.locals {
			v, diags := expr.Value(m.ctx(nil))
			if diags.HasErrors() {
				v = cty.DynamicVal
			}
			m.localVals[name] = v
		}
	}
}

// pseudo are the data sources that stand for AWS pseudo parameters.
var pseudo = map[string]map[string]cty.Value{
	"aws_partition":       {"partition": cty.StringVal(markerPartition)},
	"aws_region":          {"region": cty.StringVal(markerRegion), "name": cty.StringVal(markerRegion)},
	"aws_caller_identity": {"account_id": cty.StringVal(markerAccount)},
}

func (m *tfModule) ctx(extra map[string]cty.Value) *hcl.EvalContext {
	vars := map[string]cty.Value{}
	for name, v := range m.vars {
		vars[name] = v.def
	}
	byType := map[string]map[string]cty.Value{}
	data := map[string]map[string]cty.Value{}
	for _, b := range m.blocks {
		target := byType
		val := cty.DynamicVal
		if b.kind == "data" {
			target = data
			if attrs, ok := pseudo[b.typ]; ok {
				val = cty.ObjectVal(attrs)
			}
		}
		if target[b.typ] == nil {
			target[b.typ] = map[string]cty.Value{}
		}
		target[b.typ][b.name] = val
	}
	variables := map[string]cty.Value{
		"var":       cty.ObjectVal(vars),
		"local":     cty.ObjectVal(m.localVals),
		"path":      cty.ObjectVal(map[string]cty.Value{"module": cty.StringVal("."), "root": cty.StringVal("."), "cwd": cty.StringVal(".")}),
		"each":      cty.DynamicVal,
		"count":     cty.DynamicVal,
		"terraform": cty.DynamicVal,
	}
	dataObj := map[string]cty.Value{}
	for typ, names := range data {
		dataObj[typ] = cty.ObjectVal(names)
	}
	variables["data"] = cty.ObjectVal(dataObj)
	for typ, names := range byType {
		variables[typ] = cty.ObjectVal(names)
	}
	for k, v := range extra {
		variables[k] = v
	}
	return &hcl.EvalContext{Variables: variables, Functions: m.funcs}
}

func (m *tfModule) resources(typ string) []*tfBlock {
	var out []*tfBlock
	for _, b := range m.blocks {
		if b.kind == "resource" && b.typ == typ {
			out = append(out, b)
		}
	}
	return out
}

func (m *tfModule) data(typ, name string) *tfBlock {
	for _, b := range m.blocks {
		if b.kind == "data" && b.typ == typ && b.name == name {
			return b
		}
	}
	return nil
}

// instances expands for_each/count into the each/count values of every
// instance; a block without them has one instance.
func (m *tfModule) instances(b *tfBlock) ([]map[string]cty.Value, error) {
	if attr, ok := b.body.Attributes["for_each"]; ok {
		v, diags := attr.Expr.Value(m.ctx(nil))
		if diags.HasErrors() {
			return nil, fmt.Errorf("%s.%s for_each: %w", b.typ, b.name, diags)
		}
		if !v.IsWhollyKnown() {
			return nil, fmt.Errorf("%s.%s for_each: not known before apply", b.typ, b.name)
		}
		var out []map[string]cty.Value
		for it := v.ElementIterator(); it.Next(); {
			k, val := it.Element()
			if v.Type().IsSetType() {
				k = val
			}
			out = append(out, map[string]cty.Value{"each": cty.ObjectVal(map[string]cty.Value{"key": k, "value": val})})
		}
		return out, nil
	}
	if attr, ok := b.body.Attributes["count"]; ok {
		v, diags := attr.Expr.Value(m.ctx(nil))
		if diags.HasErrors() || !v.IsKnown() {
			return nil, fmt.Errorf("%s.%s count: not known", b.typ, b.name)
		}
		n, _ := v.AsBigFloat().Int64()
		var out []map[string]cty.Value
		for i := range n {
			out = append(out, map[string]cty.Value{"count": cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(i)})})
		}
		return out, nil
	}
	return []map[string]cty.Value{nil}, nil
}

func (m *tfModule) eval(body *hclsyntax.Body, attr string, extra map[string]cty.Value) (cty.Value, error) {
	a, ok := body.Attributes[attr]
	if !ok {
		return cty.NullVal(cty.DynamicPseudoType), nil
	}
	v, diags := a.Expr.Value(m.ctx(extra))
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("%s: %w", attr, diags)
	}
	return v, nil
}

func (m *tfModule) spec() (*Spec, error) {
	s := &Spec{
		Source:    "terraform",
		Function:  map[string]string{},
		Env:       map[string]EnvVar{},
		Rules:     map[string]string{},
		Schedules: map[string]Schedule{},
		Hooks:     map[string]Hook{},
		Params:    map[string]Param{},
		Routes:    map[string]string{},
	}

	fns := m.resources("aws_lambda_function")
	if len(fns) != 1 {
		return nil, fmt.Errorf("want exactly one aws_lambda_function, found %d", len(fns))
	}
	fn := fns[0]
	for _, name := range []string{"runtime", "architectures", "handler", "timeout", "memory_size"} {
		if _, ok := fn.body.Attributes[name]; !ok {
			continue
		}
		v, err := m.eval(fn.body, name, nil)
		if err != nil {
			return nil, fmt.Errorf("aws_lambda_function.%s: %w", fn.name, err)
		}
		s.Function[name] = tfString(v)
	}
	for _, b := range fn.body.Blocks {
		if b.Type != "logging_config" {
			continue
		}
		for attr, name := range map[string]string{"log_format": "log_format", "application_log_level": "application_log_level"} {
			if _, ok := b.Body.Attributes[attr]; !ok {
				continue
			}
			v, err := m.eval(b.Body, attr, nil)
			if err != nil {
				return nil, fmt.Errorf("aws_lambda_function.%s logging_config: %w", fn.name, err)
			}
			s.Function[name] = tfString(v)
		}
	}
	if err := m.envSpec(s, fn); err != nil {
		return nil, err
	}

	for _, rule := range m.resources("aws_cloudwatch_event_rule") {
		if _, onBus := rule.body.Attributes["event_bus_name"]; onBus {
			if err := m.routeSpec(s, rule); err != nil {
				return nil, err
			}
			continue
		}
		insts, err := m.instances(rule)
		if err != nil {
			return nil, err
		}
		for _, extra := range insts {
			name, err := m.eval(rule.body, "name", extra)
			if err != nil {
				return nil, fmt.Errorf("aws_cloudwatch_event_rule.%s: %w", rule.name, err)
			}
			if _, scheduled := rule.body.Attributes["schedule_expression"]; scheduled {
				sched := Schedule{State: "ENABLED"}
				for attr, dst := range map[string]*string{"schedule_expression": &sched.Expression, "state": &sched.State} {
					v, err := m.eval(rule.body, attr, extra)
					if err != nil {
						return nil, fmt.Errorf("aws_cloudwatch_event_rule.%s: %w", rule.name, err)
					}
					if !v.IsNull() {
						*dst = tfString(v)
					}
				}
				s.Schedules[tfString(name)] = sched
				continue
			}
			pattern, err := m.eval(rule.body, "event_pattern", extra)
			if err != nil {
				return nil, fmt.Errorf("aws_cloudwatch_event_rule.%s: %w", rule.name, err)
			}
			if !pattern.IsWhollyKnown() || pattern.Type() != cty.String {
				return nil, fmt.Errorf("aws_cloudwatch_event_rule.%s: event_pattern is not a literal JSON string", rule.name)
			}
			var p any
			if err := json.Unmarshal([]byte(pattern.AsString()), &p); err != nil {
				return nil, fmt.Errorf("aws_cloudwatch_event_rule.%s event_pattern: %w", rule.name, err)
			}
			canon, err := canonicalJSON(p)
			if err != nil {
				return nil, err
			}
			s.Rules[tfString(name)] = canon
		}
	}

	if err := m.roleSpec(s, fn); err != nil {
		return nil, err
	}

	for _, h := range m.resources("aws_autoscaling_lifecycle_hook") {
		hook := Hook{}
		vals := map[string]*string{"name": &hook.Name, "heartbeat_timeout": &hook.HeartbeatTimeout, "default_result": &hook.DefaultResult}
		for attr, dst := range vals {
			v, err := m.eval(h.body, attr, nil)
			if err != nil {
				return nil, fmt.Errorf("aws_autoscaling_lifecycle_hook.%s: %w", h.name, err)
			}
			*dst = tfString(v)
		}
		tr, err := m.eval(h.body, "lifecycle_transition", nil)
		if err != nil {
			return nil, err
		}
		if _, dup := s.Hooks[tfString(tr)]; dup {
			return nil, fmt.Errorf("two lifecycle hooks for %s", tfString(tr))
		}
		s.Hooks[tfString(tr)] = hook
	}

	for _, e := range m.resources("aws_eks_access_entry") {
		v, err := m.eval(e.body, "kubernetes_groups", nil)
		if err != nil {
			return nil, err
		}
		for _, g := range tfList(v) {
			s.AccessEntryGroups = append(s.AccessEntryGroups, tfString(g))
		}
	}

	s.Alarms = map[string]AlarmSpec{}
	for _, a := range m.resources("aws_cloudwatch_metric_alarm") {
		vals := map[string]string{}
		for _, attr := range []string{"alarm_name", "namespace", "metric_name", "statistic", "period", "evaluation_periods",
			"threshold", "comparison_operator", "treat_missing_data", "alarm_actions"} {
			v, err := m.eval(a.body, attr, nil)
			if err != nil {
				return nil, fmt.Errorf("aws_cloudwatch_metric_alarm.%s: %w", a.name, err)
			}
			vals[attr] = tfString(v)
		}
		dv, err := m.eval(a.body, "dimensions", nil)
		if err != nil {
			return nil, fmt.Errorf("aws_cloudwatch_metric_alarm.%s: %w", a.name, err)
		}
		var dims []string
		if dv.IsKnown() && !dv.IsNull() && dv.CanIterateElements() {
			for it := dv.ElementIterator(); it.Next(); {
				k, v := it.Element()
				dims = append(dims, tfString(k)+"="+tfString(v))
			}
		}
		sort.Strings(dims)
		s.Alarms[vals["alarm_name"]] = AlarmSpec{
			Namespace: vals["namespace"], Metric: vals["metric_name"], Statistic: vals["statistic"],
			Dimensions: strings.Join(dims, ","), Period: vals["period"], EvaluationPeriods: vals["evaluation_periods"],
			Threshold: vals["threshold"], Comparison: vals["comparison_operator"], TreatMissingData: vals["treat_missing_data"],
			Actions: vals["alarm_actions"],
		}
	}

	for name, v := range m.vars {
		def := ""
		if v.hasDefault {
			def = tfString(v.def)
		}
		s.Params[name] = Param{Default: def, Required: !v.hasDefault}
	}
	s.Outputs = append(s.Outputs, m.outputs...)
	sort.Strings(s.Outputs)
	return s, nil
}

// envSpec reads environment { variables = ... } of the function, following one
// local when the map is kept in a local.
func (m *tfModule) envSpec(s *Spec, fn *tfBlock) error {
	var env *hclsyntax.Block
	for _, b := range fn.body.Blocks {
		if b.Type == "environment" {
			env = b
		}
	}
	if env == nil {
		return nil
	}
	attr, ok := env.Body.Attributes["variables"]
	if !ok {
		return nil
	}
	expr := attr.Expr
	if st, ok := expr.(*hclsyntax.ScopeTraversalExpr); ok && st.Traversal.RootName() == "local" && len(st.Traversal) == 2 {
		if name, ok := st.Traversal[1].(hcl.TraverseAttr); ok {
			if local, ok := m.locals[name.Name].(hclsyntax.Expression); ok {
				expr = local
			}
		}
	}
	obj, ok := expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		return fmt.Errorf("aws_lambda_function.%s environment variables: want an object literal (or a local holding one)", fn.name)
	}
	for _, item := range obj.Items {
		k, diags := item.KeyExpr.Value(nil)
		if diags.HasErrors() || k.Type() != cty.String {
			return fmt.Errorf("environment variable name: %w", diags)
		}
		v, diags := item.ValueExpr.Value(m.ctx(nil))
		if diags.HasErrors() {
			return fmt.Errorf("environment variable %s: %w", k.AsString(), diags)
		}
		var params []string
		for _, tr := range item.ValueExpr.Variables() {
			if tr.RootName() == "var" && len(tr) > 1 {
				if a, ok := tr[1].(hcl.TraverseAttr); ok {
					params = append(params, a.Name)
				}
			}
		}
		s.Env[k.AsString()] = EnvVar{Default: tfString(v), Params: sortedUnique(params)}
	}
	return nil
}

// roleSpec collects the statements of the policy documents of the inline
// policies of the function's role and the managed policies attached to it.
func (m *tfModule) roleSpec(s *Spec, fn *tfBlock) error {
	roleAttr, ok := fn.body.Attributes["role"]
	if !ok {
		return fmt.Errorf("aws_lambda_function.%s has no role", fn.name)
	}
	roleType, roleName, ok := refersTo(roleAttr.Expr)
	if !ok || roleType != "aws_iam_role" {
		return fmt.Errorf("aws_lambda_function.%s role must be aws_iam_role.<name>.arn", fn.name)
	}
	attachedToRole := func(b *tfBlock) bool {
		a, ok := b.body.Attributes["role"]
		if !ok {
			return false
		}
		typ, name, ok := refersTo(a.Expr)
		return ok && typ == roleType && name == roleName
	}

	for _, p := range m.resources("aws_iam_role_policy") {
		if !attachedToRole(p) {
			continue
		}
		pol := p.body.Attributes["policy"]
		if pol == nil {
			continue
		}
		// data.aws_iam_policy_document.<name>.json
		for _, tr := range pol.Expr.Variables() {
			if tr.RootName() == "data" && len(tr) >= 3 {
				typ, _ := tr[1].(hcl.TraverseAttr)
				name, _ := tr[2].(hcl.TraverseAttr)
				if typ.Name == "aws_iam_policy_document" {
					doc := m.data(typ.Name, name.Name)
					if doc == nil {
						return fmt.Errorf("data.aws_iam_policy_document.%s not found", name.Name)
					}
					sts, err := m.policyDocumentStatements(doc.body)
					if err != nil {
						return fmt.Errorf("data.aws_iam_policy_document.%s: %w", name.Name, err)
					}
					s.Statements = append(s.Statements, sts...)
				}
			}
		}
		// or jsonencode({ Statement = [...] })
		if v, diags := pol.Expr.Value(m.ctx(nil)); !diags.HasErrors() && v.IsWhollyKnown() && v.Type() == cty.String {
			var doc map[string]any
			if json.Unmarshal([]byte(v.AsString()), &doc) == nil {
				s.Statements = append(s.Statements, jsonStatements(doc)...)
			}
		}
	}
	for _, a := range m.resources("aws_iam_role_policy_attachment") {
		if !attachedToRole(a) {
			continue
		}
		v, err := m.eval(a.body, "policy_arn", nil)
		if err != nil {
			return err
		}
		s.ManagedPolicies = append(s.ManagedPolicies, tfString(v))
	}
	s.ManagedPolicies = sortedUnique(s.ManagedPolicies)
	return nil
}

// policyDocumentStatements reads statement blocks, and dynamic "statement"
// blocks' content (every dynamic statement counts, whatever its for_each).
func (m *tfModule) policyDocumentStatements(body *hclsyntax.Body) ([]Statement, error) {
	var out []Statement
	for _, b := range body.Blocks {
		var sb *hclsyntax.Body
		switch {
		case b.Type == "statement":
			sb = b.Body
		case b.Type == "dynamic" && len(b.Labels) == 1 && b.Labels[0] == "statement":
			for _, c := range b.Body.Blocks {
				if c.Type == "content" {
					sb = c.Body
				}
			}
		}
		if sb == nil {
			continue
		}
		effect, err := m.eval(sb, "effect", nil)
		if err != nil {
			return nil, err
		}
		if !effect.IsNull() && tfString(effect) != "Allow" {
			continue
		}
		var st Statement
		sid, err := m.eval(sb, "sid", nil)
		if err != nil {
			return nil, err
		}
		if !sid.IsNull() {
			st.Sid = tfString(sid)
		}
		actions, err := m.eval(sb, "actions", nil)
		if err != nil {
			return nil, err
		}
		for _, a := range tfList(actions) {
			st.Actions = append(st.Actions, tfString(a))
		}
		resources, err := m.eval(sb, "resources", nil)
		if err != nil {
			return nil, err
		}
		for _, r := range tfList(resources) {
			st.Resources = append(st.Resources, tfString(r))
		}
		cond := map[string]map[string][]string{}
		for _, c := range sb.Blocks {
			if c.Type != "condition" {
				continue
			}
			var parts [2]string
			for i, attr := range []string{"test", "variable"} {
				v, err := m.eval(c.Body, attr, nil)
				if err != nil {
					return nil, err
				}
				parts[i] = tfString(v)
			}
			values, err := m.eval(c.Body, "values", nil)
			if err != nil {
				return nil, err
			}
			if cond[parts[0]] == nil {
				cond[parts[0]] = map[string][]string{}
			}
			for _, v := range tfList(values) {
				cond[parts[0]][parts[1]] = append(cond[parts[0]][parts[1]], tfString(v))
			}
		}
		st.Condition = canonicalCondition(cond)
		st.Actions = sortedUnique(st.Actions)
		st.Resources = sortedUnique(st.Resources)
		out = append(out, st)
	}
	return out, nil
}

func jsonStatements(doc map[string]any) []Statement {
	var out []Statement
	for _, raw := range listOrOne(doc["Statement"]) {
		st := asMap(raw)
		if st == nil || st["Effect"] != "Allow" {
			continue
		}
		var s Statement
		s.Sid, _ = st["Sid"].(string)
		for _, a := range listOrOne(st["Action"]) {
			s.Actions = append(s.Actions, stringify(a))
		}
		for _, r := range listOrOne(st["Resource"]) {
			s.Resources = append(s.Resources, stringify(r))
		}
		s.Actions = sortedUnique(s.Actions)
		s.Resources = sortedUnique(s.Resources)
		out = append(out, s)
	}
	return out
}

// refersTo reports the resource an expression such as aws_iam_role.x.arn names.
func refersTo(expr hcl.Expression) (typ, name string, ok bool) {
	vars := expr.Variables()
	if len(vars) != 1 || len(vars[0]) < 2 {
		return "", "", false
	}
	attr, ok := vars[0][1].(hcl.TraverseAttr)
	if !ok {
		return "", "", false
	}
	return vars[0].RootName(), attr.Name, true
}

// tfString renders a value as terraform would pass it to a string argument;
// lists are joined with commas, unknown values become ${ref}.
func tfString(v cty.Value) string {
	switch {
	case v == cty.NilVal || v.IsNull():
		return ""
	case !v.IsKnown():
		return markerRef
	}
	ty := v.Type()
	switch {
	case ty == cty.String:
		return v.AsString()
	case ty == cty.Bool:
		if v.True() {
			return "true"
		}
		return "false"
	case ty == cty.Number:
		return formatBigFloat(v.AsBigFloat())
	case ty.IsListType() || ty.IsSetType() || ty.IsTupleType():
		var parts []string
		for _, e := range tfList(v) {
			parts = append(parts, tfString(e))
		}
		return strings.Join(parts, ",")
	}
	return markerRef
}

func tfList(v cty.Value) []cty.Value {
	if v == cty.NilVal || v.IsNull() || !v.IsKnown() || !v.CanIterateElements() {
		return nil
	}
	var out []cty.Value
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		out = append(out, e)
	}
	return out
}

func formatBigFloat(f *big.Float) string {
	if i, acc := f.Int64(); acc == big.Exact {
		return fmt.Sprint(i)
	}
	return f.Text('f', -1)
}

// tfFunctions are the terraform functions the module's literal parts use.
func tfFunctions() map[string]function.Function {
	to := func(ty cty.Type) function.Function {
		return function.New(&function.Spec{
			Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType, AllowNull: true, AllowDynamicType: true}},
			Type: func([]cty.Value) (cty.Type, error) {
				if ty.IsPrimitiveType() {
					return ty, nil
				}
				return cty.DynamicPseudoType, nil
			},
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				return convert.Convert(args[0], ty)
			},
		})
	}
	prefix := func(has func(s, p string) bool) function.Function {
		return function.New(&function.Spec{
			Params: []function.Parameter{{Name: "s", Type: cty.String}, {Name: "p", Type: cty.String}},
			Type:   function.StaticReturnType(cty.Bool),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				return cty.BoolVal(has(args[0].AsString(), args[1].AsString())), nil
			},
		})
	}
	allTrue := function.New(&function.Spec{
		Params: []function.Parameter{{Name: "list", Type: cty.List(cty.Bool)}},
		Type:   function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			for _, v := range tfList(args[0]) {
				if v.IsNull() || !v.True() {
					return cty.False, nil
				}
			}
			return cty.True, nil
		},
	})
	return map[string]function.Function{
		"jsonencode": stdlib.JSONEncodeFunc,
		"jsondecode": stdlib.JSONDecodeFunc,
		"join":       stdlib.JoinFunc,
		"split":      stdlib.SplitFunc,
		"format":     stdlib.FormatFunc,
		"lower":      stdlib.LowerFunc,
		"upper":      stdlib.UpperFunc,
		"concat":     stdlib.ConcatFunc,
		"length":     stdlib.LengthFunc,
		"keys":       stdlib.KeysFunc,
		"values":     stdlib.ValuesFunc,
		"merge":      stdlib.MergeFunc,
		"contains":   stdlib.ContainsFunc,
		"substr":     stdlib.SubstrFunc,
		"replace":    stdlib.ReplaceFunc,
		"trimspace":  stdlib.TrimSpaceFunc,
		"flatten":    stdlib.FlattenFunc,
		"distinct":   stdlib.DistinctFunc,
		"compact":    stdlib.CompactFunc,
		"coalesce":   stdlib.CoalesceFunc,
		"lookup":     stdlib.LookupFunc,
		"regex":      stdlib.RegexFunc,
		"min":        stdlib.MinFunc,
		"max":        stdlib.MaxFunc,
		"floor":      stdlib.FloorFunc,
		"tostring":   to(cty.String),
		"tonumber":   to(cty.Number),
		"tobool":     to(cty.Bool),
		"tolist":     to(cty.List(cty.DynamicPseudoType)),
		"toset":      to(cty.Set(cty.DynamicPseudoType)),
		"tomap":      to(cty.Map(cty.DynamicPseudoType)),
		"startswith": prefix(strings.HasPrefix),
		"endswith":   prefix(strings.HasSuffix),
		"alltrue":    allTrue,
		"try":        tryfunc.TryFunc,
		"can":        tryfunc.CanFunc,
	}
}

// templateFileFunc is terraform's templatefile(path, vars) for the module in
// dir: the file (path relative to the module, as path.module is ".") read as
// a template of terraform's language and rendered with vars alone.
func templateFileFunc(dir string) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}, {Name: "vars", Type: cty.DynamicPseudoType}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			path := filepath.Join(dir, args[0].AsString())
			src, err := os.ReadFile(path)
			if err != nil {
				return cty.NilVal, err
			}
			expr, diags := hclsyntax.ParseTemplate(src, path, hcl.InitialPos)
			if diags.HasErrors() {
				return cty.NilVal, diags
			}
			v, diags := expr.Value(&hcl.EvalContext{Variables: args[1].AsValueMap()})
			if diags.HasErrors() {
				return cty.NilVal, diags
			}
			return convert.Convert(v, cty.String)
		},
	})
}

// routeSpec reads a rule on an operator's bus and its targets (those whose
// rule names it), evaluated as its first instance whatever its count: the
// route both descriptions offer when it is asked for.
func (m *tfModule) routeSpec(s *Spec, rule *tfBlock) error {
	first := map[string]cty.Value{"count": cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(0)})}
	get := func(b *hclsyntax.Body, attr string) (any, error) {
		v, err := m.eval(b, attr, first)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", rule.typ, rule.name, err)
		}
		if v.IsNull() {
			return nil, nil
		}
		if v.Type() == cty.String {
			return tfString(v), nil
		}
		out := map[string]any{}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			out[tfString(k)] = tfString(e)
		}
		return out, nil
	}
	name, err := get(rule.body, "name")
	if err != nil {
		return err
	}
	bus, err := get(rule.body, "event_bus_name")
	if err != nil {
		return err
	}
	raw, err := get(rule.body, "event_pattern")
	if err != nil {
		return err
	}
	var pattern any
	if err := json.Unmarshal([]byte(fmt.Sprint(raw)), &pattern); err != nil {
		return fmt.Errorf("%s.%s event_pattern: %w", rule.typ, rule.name, err)
	}
	var targets []any
	for _, tg := range m.resources("aws_cloudwatch_event_target") {
		a, ok := tg.body.Attributes["rule"]
		if !ok {
			continue
		}
		if typ, name, ok := refersTo(a.Expr); !ok || typ != rule.typ || name != rule.name {
			continue
		}
		arn, err := get(tg.body, "arn")
		if err != nil {
			return err
		}
		t := map[string]any{"arn": arn, "inputPaths": nil, "inputTemplate": nil}
		for _, b := range tg.body.Blocks {
			if b.Type != "input_transformer" {
				continue
			}
			if t["inputPaths"], err = get(b.Body, "input_paths"); err != nil {
				return err
			}
			if t["inputTemplate"], err = get(b.Body, "input_template"); err != nil {
				return err
			}
		}
		targets = append(targets, t)
	}
	route, err := canonicalJSON(map[string]any{"bus": bus, "pattern": pattern, "targets": targets})
	if err != nil {
		return err
	}
	s.Routes[fmt.Sprint(name)] = route
	return nil
}
