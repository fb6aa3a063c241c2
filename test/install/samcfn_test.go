package install

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// cfnEval resolves the intrinsic functions of a transformed (plain
// CloudFormation) template the way CloudFormation does for one stack: with
// the stack's parameter values, its conditions, and the physical IDs and
// attributes of the resources it created. The SAM path uses it only for what
// the emulator's CloudFormation skipped, to assert on the template instead.
type cfnEval struct {
	params map[string]any    // parameter values (string, or []any for list types)
	conds  map[string]any    // the template's Conditions section
	refs   map[string]string // Ref of a resource: its physical ID
	attrs  map[string]string // "Logical.Attribute": Fn::GetAtt's value
	memo   map[string]bool
}

// noValue is AWS::NoValue: the property or list item is left out.
type noValue struct{}

func newCfnEval(tmpl map[string]any, given map[string]string, region, account, stack string) *cfnEval {
	e := &cfnEval{params: map[string]any{}, refs: map[string]string{}, attrs: map[string]string{}, memo: map[string]bool{}}
	e.conds, _ = tmpl["Conditions"].(map[string]any)
	ps, _ := tmpl["Parameters"].(map[string]any)
	for name, p := range ps {
		spec, _ := p.(map[string]any)
		v, ok := given[name]
		if !ok {
			d, has := spec["Default"]
			if !has {
				continue
			}
			v = fmt.Sprint(d)
		}
		if t, _ := spec["Type"].(string); strings.Contains(t, "List") {
			var l []any
			if v != "" {
				for _, s := range strings.Split(v, ",") {
					l = append(l, strings.TrimSpace(s))
				}
			} else {
				l = []any{""}
			}
			e.params[name] = l
		} else {
			e.params[name] = v
		}
	}
	e.params["AWS::Region"] = region
	e.params["AWS::AccountId"] = account
	e.params["AWS::Partition"] = "aws"
	e.params["AWS::URLSuffix"] = "amazonaws.com"
	e.params["AWS::StackName"] = stack
	return e
}

// condition evaluates a named condition.
func (e *cfnEval) condition(name string) (bool, error) {
	if v, ok := e.memo[name]; ok {
		return v, nil
	}
	c, ok := e.conds[name]
	if !ok {
		return false, fmt.Errorf("unknown condition %s", name)
	}
	v, err := e.resolve(c)
	if err != nil {
		return false, fmt.Errorf("condition %s: %w", name, err)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("condition %s is %T, not a boolean", name, v)
	}
	e.memo[name] = b
	return b, nil
}

// active says whether a resource is created (its Condition holds).
func (e *cfnEval) active(res map[string]any) (bool, error) {
	c, ok := res["Condition"].(string)
	if !ok {
		return true, nil
	}
	return e.condition(c)
}

// resolve returns v with every intrinsic function evaluated and AWS::NoValue
// dropped; a value that cannot be resolved is an error (never a guess).
func (e *cfnEval) resolve(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::") {
					return e.intrinsic(k, arg)
				}
			}
		}
		out := map[string]any{}
		for k, val := range x {
			r, err := e.resolve(val)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			if _, drop := r.(noValue); !drop {
				out[k] = r
			}
		}
		return out, nil
	case []any:
		out := []any{}
		for _, val := range x {
			r, err := e.resolve(val)
			if err != nil {
				return nil, err
			}
			if _, drop := r.(noValue); !drop {
				out = append(out, r)
			}
		}
		return out, nil
	case json.Number:
		return x.String(), nil
	case float64:
		if x == float64(int64(x)) {
			return fmt.Sprint(int64(x)), nil
		}
		return fmt.Sprint(x), nil
	default:
		return v, nil
	}
}

func (e *cfnEval) str(v any) (string, error) {
	r, err := e.resolve(v)
	if err != nil {
		return "", err
	}
	switch s := r.(type) {
	case string:
		return s, nil
	case bool:
		return fmt.Sprint(s), nil
	}
	return "", fmt.Errorf("%v is not a string", r)
}

func (e *cfnEval) intrinsic(fn string, arg any) (any, error) {
	args, _ := arg.([]any)
	switch fn {
	case "Ref":
		name, _ := arg.(string)
		if name == "AWS::NoValue" {
			return noValue{}, nil
		}
		if v, ok := e.params[name]; ok {
			return v, nil
		}
		if v, ok := e.refs[name]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("cannot resolve Ref %s", name)
	case "Fn::GetAtt":
		var key string
		switch a := arg.(type) {
		case string:
			key = a
		case []any:
			if len(a) == 2 {
				key = fmt.Sprintf("%v.%v", a[0], a[1])
			}
		}
		if v, ok := e.attrs[key]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("cannot resolve Fn::GetAtt %s", key)
	case "Condition":
		name, _ := arg.(string)
		return e.condition(name)
	case "Fn::If":
		if len(args) != 3 {
			return nil, fmt.Errorf("Fn::If wants 3 arguments")
		}
		name, _ := args[0].(string)
		c, err := e.condition(name)
		if err != nil {
			return nil, err
		}
		if c {
			return e.resolve(args[1])
		}
		return e.resolve(args[2])
	case "Fn::Equals":
		if len(args) != 2 {
			return nil, fmt.Errorf("Fn::Equals wants 2 arguments")
		}
		a, err := e.str(args[0])
		if err != nil {
			return nil, err
		}
		b, err := e.str(args[1])
		if err != nil {
			return nil, err
		}
		return a == b, nil
	case "Fn::Not", "Fn::And", "Fn::Or":
		var bs []bool
		for _, a := range args {
			r, err := e.resolve(a)
			if err != nil {
				return nil, err
			}
			b, ok := r.(bool)
			if !ok {
				return nil, fmt.Errorf("%s of a non-boolean %v", fn, r)
			}
			bs = append(bs, b)
		}
		switch fn {
		case "Fn::Not":
			return len(bs) == 1 && !bs[0], nil
		case "Fn::And":
			return !slices.Contains(bs, false), nil
		default:
			return slices.Contains(bs, true), nil
		}
	case "Fn::Join":
		if len(args) != 2 {
			return nil, fmt.Errorf("Fn::Join wants 2 arguments")
		}
		sep, _ := args[0].(string)
		r, err := e.resolve(args[1])
		if err != nil {
			return nil, err
		}
		l, ok := r.([]any)
		if !ok {
			return nil, fmt.Errorf("Fn::Join of %v", r)
		}
		parts := make([]string, len(l))
		for i, p := range l {
			parts[i] = fmt.Sprint(p)
		}
		return strings.Join(parts, sep), nil
	case "Fn::Split":
		if len(args) != 2 {
			return nil, fmt.Errorf("Fn::Split wants 2 arguments")
		}
		sep, _ := args[0].(string)
		s, err := e.str(args[1])
		if err != nil {
			return nil, err
		}
		var out []any
		for _, p := range strings.Split(s, sep) {
			out = append(out, p)
		}
		return out, nil
	case "Fn::Select":
		if len(args) != 2 {
			return nil, fmt.Errorf("Fn::Select wants 2 arguments")
		}
		is, err := e.str(args[0])
		if err != nil {
			return nil, err
		}
		var i int
		if _, err := fmt.Sscan(is, &i); err != nil {
			return nil, err
		}
		r, err := e.resolve(args[1])
		if err != nil {
			return nil, err
		}
		l, ok := r.([]any)
		if !ok || i < 0 || i >= len(l) {
			return nil, fmt.Errorf("Fn::Select %d of %v", i, r)
		}
		return l[i], nil
	case "Fn::Sub":
		var tmpl string
		vars := map[string]any{}
		switch a := arg.(type) {
		case string:
			tmpl = a
		case []any:
			if len(a) != 2 {
				return nil, fmt.Errorf("Fn::Sub wants 1 or 2 arguments")
			}
			tmpl, _ = a[0].(string)
			m, _ := a[1].(map[string]any)
			for k, v := range m {
				r, err := e.resolve(v)
				if err != nil {
					return nil, err
				}
				vars[k] = r
			}
		}
		return e.sub(tmpl, vars)
	}
	return nil, fmt.Errorf("unsupported intrinsic %s", fn)
}

func (e *cfnEval) sub(tmpl string, vars map[string]any) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "${")
		if i < 0 {
			b.WriteString(tmpl)
			return b.String(), nil
		}
		b.WriteString(tmpl[:i])
		j := strings.Index(tmpl[i:], "}")
		if j < 0 {
			return "", fmt.Errorf("unterminated ${ in %q", tmpl)
		}
		name := tmpl[i+2 : i+j]
		tmpl = tmpl[i+j+1:]
		if strings.HasPrefix(name, "!") { // ${!Literal}
			b.WriteString("${" + name[1:] + "}")
			continue
		}
		var v any
		var err error
		if x, ok := vars[name]; ok {
			v = x
		} else if strings.Contains(name, ".") {
			v, err = e.intrinsic("Fn::GetAtt", name)
		} else {
			v, err = e.intrinsic("Ref", name)
		}
		if err != nil {
			return "", err
		}
		fmt.Fprint(&b, v)
	}
}
