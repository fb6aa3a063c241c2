package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LoadSAM reads a SAM/CloudFormation template (YAML, short tags such as !Ref,
// !Sub, !GetAtt and !If included) into a Spec.
func LoadSAM(path string) (*Spec, error) {
	top, err := templateDoc(path)
	if err != nil {
		return nil, err
	}
	t, err := newCfnTemplate(top)
	if err != nil {
		return nil, fmt.Errorf("SAM template %s: %w", path, err)
	}
	spec, err := t.spec()
	if err != nil {
		return nil, fmt.Errorf("SAM template %s: %w", path, err)
	}
	return spec, nil
}

// templateDoc reads a CloudFormation template as plain Go values (short
// tags in their long forms, see cfnValue).
func templateDoc(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading SAM template: %w", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parsing SAM template %s: %w", path, err)
	}
	doc, err := cfnValue(&root)
	if err != nil {
		return nil, fmt.Errorf("parsing SAM template %s: %w", path, err)
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("SAM template %s: not a mapping", path)
	}
	return top, nil
}

// cfnValue turns a YAML node into plain Go values, rewriting CloudFormation's
// short tags into their long forms (!Ref x -> {"Ref": x}, !GetAtt a.b ->
// {"Fn::GetAtt": [a, b]}, !Sub s -> {"Fn::Sub": s}, ...).
func cfnValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return cfnValue(n.Content[0])
	case yaml.AliasNode:
		return cfnValue(n.Alias)
	}

	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			val, err := cfnValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[k] = val
		}
		v = m
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			val, err := cfnValue(c)
			if err != nil {
				return nil, err
			}
			l = append(l, val)
		}
		v = l
	case yaml.ScalarNode:
		if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
			v = n.Value // a short tag's scalar argument is a string
		} else if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
	default:
		return nil, fmt.Errorf("line %d: unexpected YAML node kind %v", n.Line, n.Kind)
	}

	if !strings.HasPrefix(n.Tag, "!") || strings.HasPrefix(n.Tag, "!!") {
		return v, nil
	}
	switch tag := strings.TrimPrefix(n.Tag, "!"); tag {
	case "Ref", "Condition":
		return map[string]any{tag: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			obj, attr, _ := strings.Cut(s, ".")
			v = []any{obj, attr}
		}
		return map[string]any{"Fn::GetAtt": v}, nil
	default:
		return map[string]any{"Fn::" + tag: v}, nil
	}
}

type cfnParam struct {
	typ        string
	def        any
	hasDefault bool
}

type cfnResource struct {
	id    string
	typ   string
	body  map[string]any
	props map[string]any
}

type cfnTemplate struct {
	params     map[string]cfnParam
	conditions map[string]any
	resources  []*cfnResource
	byID       map[string]*cfnResource
	outputs    map[string]any
	globals    map[string]any
}

func newCfnTemplate(top map[string]any) (*cfnTemplate, error) {
	t := &cfnTemplate{
		params:     map[string]cfnParam{},
		conditions: asMap(top["Conditions"]),
		byID:       map[string]*cfnResource{},
		outputs:    asMap(top["Outputs"]),
		globals:    asMap(top["Globals"]),
	}
	for name, raw := range asMap(top["Parameters"]) {
		p := asMap(raw)
		def, has := p["Default"]
		t.params[name] = cfnParam{typ: fmt.Sprint(p["Type"]), def: def, hasDefault: has}
	}
	if err := t.addResources(asMap(top["Resources"])); err != nil {
		return nil, err
	}
	sort.Slice(t.resources, func(i, j int) bool { return t.resources[i].id < t.resources[j].id })
	return t, nil
}

// addResources records resources. Fn::ForEach is refused: the template has
// SAM's transform alone (the Serverless Application Repository and every SAM
// CLI version take it).
func (t *cfnTemplate) addResources(res map[string]any) error {
	for id, raw := range res {
		if strings.HasPrefix(id, "Fn::ForEach::") {
			return fmt.Errorf("%s: Fn::ForEach needs the AWS::LanguageExtensions transform, which the template must not use", id)
		}
		body := asMap(raw)
		r := &cfnResource{id: id, typ: fmt.Sprint(body["Type"]), body: body, props: asMap(body["Properties"])}
		t.resources = append(t.resources, r)
		t.byID[id] = r
	}
	return nil
}

func (t *cfnTemplate) ofType(types ...string) []*cfnResource {
	var out []*cfnResource
	for _, r := range t.resources {
		for _, typ := range types {
			if r.typ == typ {
				out = append(out, r)
			}
		}
	}
	return out
}

func (t *cfnTemplate) spec() (*Spec, error) {
	s := &Spec{
		Source:    "sam",
		Function:  map[string]string{},
		Env:       map[string]EnvVar{},
		Rules:     map[string]string{},
		Schedules: map[string]Schedule{},
		Hooks:     map[string]Hook{},
		Params:    map[string]Param{},
		Routes:    map[string]string{},
	}

	fns := t.ofType("AWS::Serverless::Function", "AWS::Lambda::Function")
	if len(fns) != 1 {
		return nil, fmt.Errorf("want exactly one function, found %d", len(fns))
	}
	fn := fns[0]
	r := t.resolver(fn)
	props := map[string]any{}
	if fn.typ == "AWS::Serverless::Function" {
		for k, v := range asMap(t.globals["Function"]) {
			props[k] = v
		}
	}
	for k, v := range fn.props {
		props[k] = v
	}
	for cfnName, name := range map[string]string{
		"Runtime": "runtime", "Architectures": "architectures", "Handler": "handler",
		"Timeout": "timeout", "MemorySize": "memory_size",
	} {
		if v, ok := props[cfnName]; ok {
			s.Function[name] = stringify(r.resolve(v))
		}
	}

	for cfnName, name := range map[string]string{"LogFormat": "log_format", "ApplicationLogLevel": "application_log_level"} {
		if v, ok := asMap(props["LoggingConfig"])[cfnName]; ok {
			s.Function[name] = stringify(r.resolve(v))
		}
	}

	for name, raw := range asMap(asMap(props["Environment"])["Variables"]) {
		s.Env[name] = EnvVar{Default: stringify(r.resolve(raw)), Params: t.paramRefs(raw)}
	}

	for key, raw := range asMap(props["Events"]) {
		ev := asMap(raw)
		if ev["Type"] == "Schedule" {
			ep := asMap(ev["Properties"])
			name := fn.id + key
			if n, ok := ep["Name"]; ok {
				name = stringify(r.resolve(n))
			}
			state := "ENABLED"
			if st, ok := ep["State"]; ok {
				state = stringify(r.resolve(st))
			} else if en, ok := ep["Enabled"]; ok && stringify(r.resolve(en)) == "false" {
				state = "DISABLED"
			}
			s.Schedules[name] = Schedule{Expression: stringify(r.resolve(ep["Schedule"])), State: state}
			continue
		}
		if typ := ev["Type"]; typ != "EventBridgeRule" && typ != "CloudWatchEvent" {
			continue
		}
		ep := asMap(ev["Properties"])
		name := fn.id + key
		if n, ok := ep["RuleName"]; ok {
			name = stringify(r.resolve(n))
		}
		pattern, err := canonicalJSON(r.resolve(ep["Pattern"]))
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", key, err)
		}
		s.Rules[name] = pattern
	}
	for _, rule := range t.ofType("AWS::Events::Rule") {
		rr := t.resolver(rule)
		name := rule.id
		if n, ok := rule.props["Name"]; ok {
			name = stringify(rr.resolve(n))
		}
		if bus, ok := rule.props["EventBusName"]; ok {
			var targets []any
			for _, tg := range asList(rule.props["Targets"]) {
				it := asMap(asMap(tg)["InputTransformer"])
				targets = append(targets, map[string]any{"arn": rr.resolve(asMap(tg)["Arn"]),
					"inputPaths": rr.resolve(it["InputPathsMap"]), "inputTemplate": rr.resolve(it["InputTemplate"])})
			}
			route, err := canonicalJSON(map[string]any{"bus": rr.resolve(bus), "pattern": rr.resolve(rule.props["EventPattern"]), "targets": targets})
			if err != nil {
				return nil, fmt.Errorf("rule %s: %w", rule.id, err)
			}
			s.Routes[name] = route
			continue
		}
		if expr, ok := rule.props["ScheduleExpression"]; ok {
			state := "ENABLED"
			if st, ok := rule.props["State"]; ok {
				state = stringify(rr.resolve(st))
			}
			s.Schedules[name] = Schedule{Expression: stringify(rr.resolve(expr)), State: state}
			continue
		}
		pattern, err := canonicalJSON(rr.resolve(rule.props["EventPattern"]))
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", rule.id, err)
		}
		s.Rules[name] = pattern
	}

	if err := t.roleSpec(s, props); err != nil {
		return nil, err
	}

	// the hooks the function puts for the stack (internal/hooks/stack.go:
	// default result CONTINUE, both transitions when asked for)
	for _, h := range t.ofType("Custom::LifecycleHooks") {
		hr := t.resolver(h)
		get := func(k string) string { return stringify(hr.resolve(h.props[k])) }
		for tr, name := range map[string]string{"autoscaling:EC2_INSTANCE_TERMINATING": "TerminateHookName", "autoscaling:EC2_INSTANCE_LAUNCHING": "LaunchHookName"} {
			if _, dup := s.Hooks[tr]; dup {
				return nil, fmt.Errorf("two lifecycle hooks for %s", tr)
			}
			s.Hooks[tr] = Hook{Name: get(name), HeartbeatTimeout: get("HeartbeatTimeout"), DefaultResult: "CONTINUE"}
		}
	}
	for _, h := range t.ofType("AWS::AutoScaling::LifecycleHook") {
		hr := t.resolver(h)
		tr := stringify(hr.resolve(h.props["LifecycleTransition"]))
		if _, dup := s.Hooks[tr]; dup {
			return nil, fmt.Errorf("two lifecycle hooks for %s", tr)
		}
		s.Hooks[tr] = Hook{
			Name:             stringify(hr.resolve(h.props["LifecycleHookName"])),
			HeartbeatTimeout: stringify(hr.resolve(h.props["HeartbeatTimeout"])),
			DefaultResult:    stringify(hr.resolve(h.props["DefaultResult"])),
		}
	}

	for _, e := range t.ofType("AWS::EKS::AccessEntry") {
		for _, g := range asList(t.resolver(e).resolve(e.props["KubernetesGroups"])) {
			s.AccessEntryGroups = append(s.AccessEntryGroups, stringify(g))
		}
	}

	s.Alarms = map[string]AlarmSpec{}
	for _, a := range t.ofType("AWS::CloudWatch::Alarm") {
		ar := t.resolver(a)
		get := func(k string) string { return stringify(ar.resolve(a.props[k])) }
		var dims []string
		for _, d := range asList(a.props["Dimensions"]) {
			dm := asMap(d)
			dims = append(dims, stringify(ar.resolve(dm["Name"]))+"="+stringify(ar.resolve(dm["Value"])))
		}
		sort.Strings(dims)
		s.Alarms[get("AlarmName")] = AlarmSpec{
			Namespace: get("Namespace"), Metric: get("MetricName"), Statistic: get("Statistic"),
			Dimensions: strings.Join(dims, ","), Period: get("Period"), EvaluationPeriods: get("EvaluationPeriods"),
			Threshold: get("Threshold"), Comparison: get("ComparisonOperator"), TreatMissingData: get("TreatMissingData"),
			Actions: get("AlarmActions"),
		}
	}

	for name, p := range t.params {
		s.Params[SnakeCase(name)] = Param{Default: stringify(p.def), Required: !p.hasDefault}
	}
	for name := range t.outputs {
		s.Outputs = append(s.Outputs, SnakeCase(name))
	}
	sort.Strings(s.Outputs)
	return s, nil
}

// roleSpec collects the permission statements and managed policies of the
// function's role: its inline Policies and every RolePolicy/Policy attached to it.
func (t *cfnTemplate) roleSpec(s *Spec, fnProps map[string]any) error {
	att, ok := asMap(fnProps["Role"])["Fn::GetAtt"].([]any)
	if !ok || len(att) != 2 || att[1] != "Arn" {
		return errors.New("the function's Role must be !GetAtt <role>.Arn of a role in the template")
	}
	roleID := fmt.Sprint(att[0])
	role, ok := t.byID[roleID]
	if !ok || role.typ != "AWS::IAM::Role" {
		return fmt.Errorf("role %s: not an AWS::IAM::Role of the template", roleID)
	}
	r := t.resolver(role)
	for _, pol := range asList(role.props["Policies"]) {
		s.Statements = append(s.Statements, t.statements(r, asMap(pol)["PolicyDocument"])...)
	}
	for _, alt := range alternatives(role.props["ManagedPolicyArns"]) {
		for _, arn := range asList(r.resolve(alt)) {
			s.ManagedPolicies = append(s.ManagedPolicies, stringify(arn))
		}
	}
	s.ManagedPolicies = sortedUnique(s.ManagedPolicies)

	refsRole := func(v any) bool { return asMap(v)["Ref"] == roleID }
	for _, p := range t.ofType("AWS::IAM::RolePolicy", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy") {
		attached := refsRole(p.props["RoleName"])
		for _, x := range asList(p.props["Roles"]) {
			attached = attached || refsRole(x)
		}
		if attached {
			sts := t.statements(t.resolver(p), p.props["PolicyDocument"])
			// a policy that exists under a condition: its resources are
			// that condition's (the listed groups' policies exist only
			// when AsgNames is set), as a dynamic statement's in terraform
			if _, conditional := p.body["Condition"]; conditional {
				for i := range sts {
					sts[i].Conditional = true
				}
			}
			s.Statements = append(s.Statements, sts...)
		}
	}
	return nil
}

// statements returns the Allow statements of a policy document, every branch
// of an !If included.
func (t *cfnTemplate) statements(r cfnResolver, doc any) []Statement {
	var out []Statement
	// a document given as a JSON string (!Sub: a condition key built from
	// a parameter cannot be a YAML key), resolved with the defaults
	if str, ok := r.resolve(doc).(string); ok {
		var parsed map[string]any
		if err := json.Unmarshal([]byte(str), &parsed); err != nil {
			return []Statement{{Sid: "unparsable policy document: " + err.Error()}}
		}
		doc = parsed
	}
	for _, stAlt := range alternatives(asMap(doc)["Statement"]) {
		items, isList := stAlt.([]any)
		if !isList {
			items = []any{stAlt}
		}
		for _, item := range items {
			for _, raw := range alternatives(item) {
				st := asMap(raw)
				if st == nil || stringify(r.resolve(st["Effect"])) != "Allow" {
					continue
				}
				var s Statement
				s.Sid = stringify(r.resolve(st["Sid"]))
				for _, a := range alternatives(st["Action"]) {
					for _, x := range listOrOne(r.resolve(a)) {
						s.Actions = append(s.Actions, stringify(x))
					}
				}
				// a resource built from AsgNames is the listed groups', whose
				// default is none (as terraform's dynamic statement)
				s.Conditional = containsIf(st["Resource"]) || slices.Contains(t.paramRefs(st["Resource"]), "asg_names")
				for _, a := range alternatives(st["Resource"]) {
					for _, x := range listOrOne(r.resolve(a)) {
						s.Resources = append(s.Resources, stringify(x))
					}
				}
				cond := map[string]map[string][]string{}
				for op, keys := range asMap(r.resolve(st["Condition"])) {
					cond[op] = map[string][]string{}
					for k, v := range asMap(keys) {
						for _, x := range listOrOne(v) {
							cond[op][k] = append(cond[op][k], stringify(x))
						}
					}
				}
				s.Condition = canonicalCondition(cond)
				s.Actions = sortedUnique(s.Actions)
				s.Resources = sortedUnique(s.Resources)
				out = append(out, s)
			}
		}
	}
	return out
}

// alternatives expands !If into both branches (recursively) and drops
// AWS::NoValue: every value the property can take.
func alternatives(v any) []any {
	m := asMap(v)
	if args, ok := m["Fn::If"].([]any); ok && len(m) == 1 && len(args) == 3 {
		return append(alternatives(args[1]), alternatives(args[2])...)
	}
	if len(m) == 1 && m["Ref"] == "AWS::NoValue" {
		return nil
	}
	if v == nil {
		return nil
	}
	return []any{v}
}

func containsIf(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if k == "Fn::If" || containsIf(val) {
				return true
			}
		}
	case []any:
		for _, val := range x {
			if containsIf(val) {
				return true
			}
		}
	}
	return false
}

// paramRefs lists the template parameters (snake_case) a value is built from.
func (t *cfnTemplate) paramRefs(v any) []string {
	var refs []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				if k == "Ref" {
					if name, ok := val.(string); ok {
						if _, isParam := t.params[name]; isParam {
							refs = append(refs, SnakeCase(name))
						}
					}
				}
				if k == "Fn::Sub" {
					tmpl := val
					if l, ok := val.([]any); ok && len(l) > 0 {
						tmpl = l[0]
						walk(l[1:])
					}
					if s, ok := tmpl.(string); ok {
						for _, m := range subVar.FindAllStringSubmatch(s, -1) {
							if _, isParam := t.params[m[1]]; isParam {
								refs = append(refs, SnakeCase(m[1]))
							}
						}
					}
					continue
				}
				walk(val)
			}
		case []any:
			for _, val := range x {
				walk(val)
			}
		}
	}
	walk(v)
	return sortedUnique(refs)
}

type noValueType struct{}

// noValue is what AWS::NoValue resolves to: the property is left out.
var noValue = noValueType{}

type cfnResolver struct {
	t *cfnTemplate
}

func (t *cfnTemplate) resolver(*cfnResource) cfnResolver {
	return cfnResolver{t: t}
}

var subVar = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

// resolve evaluates intrinsic functions with the parameters' defaults.
func (r cfnResolver) resolve(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, 0, len(x))
		for _, item := range x {
			if res := r.resolve(item); res != noValue {
				out = append(out, res)
			}
		}
		return out
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if res, ok := r.intrinsic(k, arg); ok {
					return res
				}
			}
		}
		out := make(map[string]any, len(x))
		for k, item := range x {
			if res := r.resolve(item); res != noValue {
				out[k] = res
			}
		}
		return out
	default:
		return v
	}
}

func (r cfnResolver) intrinsic(fn string, arg any) (any, bool) {
	switch fn {
	case "Ref":
		return r.ref(fmt.Sprint(arg)), true
	case "Fn::GetAtt":
		return markerRef, true
	case "Fn::Sub":
		tmpl, vars := arg, map[string]any{}
		if l, ok := arg.([]any); ok && len(l) == 2 {
			tmpl = l[0]
			for k, val := range asMap(l[1]) {
				vars[k] = r.resolve(val)
			}
		}
		s, _ := tmpl.(string)
		return r.sub(s, vars), true
	case "Fn::Join":
		l, ok := arg.([]any)
		if !ok || len(l) != 2 {
			return "${unknown}", true
		}
		var parts []string
		for _, p := range listOrOne(r.resolve(l[1])) {
			parts = append(parts, stringify(p))
		}
		return strings.Join(parts, stringify(l[0])), true
	case "Fn::Split":
		l, ok := arg.([]any)
		if !ok || len(l) != 2 {
			return "${unknown}", true
		}
		var out []any
		for _, p := range strings.Split(stringify(r.resolve(l[1])), stringify(l[0])) {
			out = append(out, p)
		}
		return out, true
	case "Fn::Select":
		l, ok := arg.([]any)
		if !ok || len(l) != 2 {
			return "${unknown}", true
		}
		i, err := strconv.Atoi(stringify(r.resolve(l[0])))
		items := listOrOne(r.resolve(l[1]))
		if err != nil || i < 0 || i >= len(items) {
			return "${unknown}", true
		}
		return items[i], true
	case "Fn::If":
		l, ok := arg.([]any)
		if !ok || len(l) != 3 {
			return "${unknown}", true
		}
		if r.condition(map[string]any{"Condition": l[0]}) {
			return r.resolve(l[1]), true
		}
		return r.resolve(l[2]), true
	}
	if strings.HasPrefix(fn, "Fn::") {
		return "${unknown}", true
	}
	return nil, false
}

func (r cfnResolver) ref(name string) any {
	switch name {
	case "AWS::NoValue":
		return noValue
	case "AWS::Partition":
		return markerPartition
	case "AWS::Region":
		return markerRegion
	case "AWS::AccountId":
		return markerAccount
	}
	if strings.HasPrefix(name, "AWS::") {
		return "${aws:" + strings.ToLower(strings.TrimPrefix(name, "AWS::")) + "}"
	}
	if p, ok := r.t.params[name]; ok {
		list := p.typ == "CommaDelimitedList" || strings.HasPrefix(p.typ, "List<")
		if !p.hasDefault {
			if list {
				return []any{paramMarker(SnakeCase(name))}
			}
			return paramMarker(SnakeCase(name))
		}
		if list {
			var out []any
			for _, item := range strings.Split(stringify(p.def), ",") {
				out = append(out, strings.TrimSpace(item))
			}
			return out
		}
		return stringify(p.def)
	}
	return markerRef // another resource
}

func (r cfnResolver) sub(s string, vars map[string]any) string {
	out := subVar.ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		if v, ok := vars[name]; ok {
			return stringify(v)
		}
		if strings.Contains(name, ".") {
			return markerRef // ${Resource.Attribute}
		}
		return stringify(r.ref(name))
	})
	return strings.ReplaceAll(out, "${!", "${")
}

func (r cfnResolver) condition(v any) bool {
	m := asMap(v)
	if name, ok := m["Condition"].(string); ok && len(m) == 1 {
		return r.condition(r.t.conditions[name])
	}
	args, _ := func() ([]any, bool) {
		for _, k := range []string{"Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or"} {
			if a, ok := m[k].([]any); ok {
				return a, true
			}
		}
		return nil, false
	}()
	switch {
	case m["Fn::Equals"] != nil && len(args) == 2:
		return stringify(r.resolve(args[0])) == stringify(r.resolve(args[1]))
	case m["Fn::Not"] != nil && len(args) == 1:
		return !r.condition(args[0])
	case m["Fn::And"] != nil:
		for _, a := range args {
			if !r.condition(a) {
				return false
			}
		}
		return true
	case m["Fn::Or"] != nil:
		for _, a := range args {
			if r.condition(a) {
				return true
			}
		}
		return false
	}
	return false
}

// stringify renders a resolved value as CloudFormation would pass it to a
// string property: lists joined with commas.
func stringify(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case []any:
		parts := make([]string, 0, len(x))
		for _, item := range x {
			parts = append(parts, stringify(item))
		}
		return strings.Join(parts, ",")
	case noValueType:
		return ""
	default:
		return markerRef
	}
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func listOrOne(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	if v == nil || v == noValue {
		return nil
	}
	return []any{v}
}
