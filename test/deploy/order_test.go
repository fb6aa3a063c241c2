package deploy

import (
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// The order in which CloudFormation and terraform change the resources
// around the hooks is what makes a change hold in AWS, where a call the
// role is no longer granted is refused; the emulator evaluates no IAM, so
// the order is read here from the descriptions themselves. An update
// changes a resource after those it depends on, a delete (terraform: a
// destroy, also of one resource while another is updated) removes it before
// them.
//
//   - the removal of the hooks (SAM: LifecycleHooks' Delete; terraform:
//     aws_lambda_invocation.hooks) depends on the grants it uses, so it runs
//     before they go;
//   - on an update, the hooks of the groups leaving the deployment are
//     removed (SAM: LifecycleHooksRelease; terraform:
//     aws_lambda_invocation.release) before the grants on them change: the
//     grants depend on the release step, which depends on no grant;
//   - terraform's own hooks on the listed groups depend on the grant on those
//     groups, so a dropped group's hook is destroyed before the grant narrows.
func TestHookChangesOrderedAgainstGrants(t *testing.T) {
	t.Run("sam", func(t *testing.T) {
		top, err := templateDoc(filepath.Join(repoRoot, "template.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		res := asMap(top["Resources"])
		deps := map[string][]string{}
		for id, body := range res {
			deps[id] = cfnDeps(body, res)
		}
		for _, c := range []struct{ from, to string }{
			{"LifecycleHooks", "ListedGroupsPolicy"}, {"LifecycleHooks", "GroupTagPolicy"},
			{"ListedGroupsPolicy", "LifecycleHooksRelease"}, {"GroupTagPolicy", "LifecycleHooksRelease"},
		} {
			if !reaches(deps, c.from, c.to) {
				t.Errorf("%s does not depend on %s: %s", c.from, c.to, orderWhy(c.from, c.to))
			}
		}
		for _, grant := range []string{"ListedGroupsPolicy", "GroupTagPolicy"} {
			if reaches(deps, "LifecycleHooksRelease", grant) {
				t.Errorf("LifecycleHooksRelease depends on %s: the release would run after the grant changed", grant)
			}
		}
		hooks, release := asMap(asMap(res["LifecycleHooks"])["Properties"]), asMap(asMap(res["LifecycleHooksRelease"])["Properties"])
		if asMap(res["LifecycleHooksRelease"])["Type"] != "Custom::LifecycleHooksRelease" || release["Release"] != "true" {
			t.Errorf("LifecycleHooksRelease: type %v, Release %v; want the release step (Release \"true\")", asMap(res["LifecycleHooksRelease"])["Type"], release["Release"])
		}
		// the same properties, so that every change that reaches the hooks
		// reaches the release step first
		for k, v := range hooks {
			if k != "Grants" && !reflect.DeepEqual(release[k], v) {
				t.Errorf("LifecycleHooksRelease's %s is %v, LifecycleHooks' %v: an update would not reach both", k, release[k], v)
			}
		}
	})

	t.Run("terraform", func(t *testing.T) {
		m, err := parseModule(filepath.Join(repoRoot, "terraform"))
		if err != nil {
			t.Fatal(err)
		}
		deps := map[string][]string{}
		for _, b := range m.blocks {
			if b.kind == "resource" {
				deps[b.typ+"."+b.name] = tfDeps(b.body)
			}
		}
		for _, c := range []struct{ from, to string }{
			{"aws_lambda_invocation.hooks", "aws_iam_role_policy.discovery"},
			{"aws_iam_role_policy.discovery", "aws_lambda_invocation.release"},
			{"aws_autoscaling_lifecycle_hook.terminate", "aws_iam_role_policy.function"},
			{"aws_autoscaling_lifecycle_hook.launch", "aws_iam_role_policy.function"},
		} {
			if !reaches(deps, c.from, c.to) {
				t.Errorf("%s does not depend on %s: %s", c.from, c.to, orderWhy(c.from, c.to))
			}
		}
		if reaches(deps, "aws_lambda_invocation.release", "aws_iam_role_policy.discovery") {
			t.Error("aws_lambda_invocation.release depends on aws_iam_role_policy.discovery: the release would run after the grant changed")
		}
		// both invocations carry the same hook settings (the release's with
		// Release = "true"), so that every change reaches both
		for _, name := range []string{"hooks", "release"} {
			var inv *tfBlock
			for _, b := range m.resources("aws_lambda_invocation") {
				if b.name == name {
					inv = b
				}
			}
			if inv == nil {
				t.Fatalf("no aws_lambda_invocation.%s", name)
			}
			if !slices.Contains(tfDeps(inv.body), "local.hooks_input") {
				t.Errorf("aws_lambda_invocation.%s's input is not local.hooks_input", name)
			}
		}
	})
}

func orderWhy(from, to string) string {
	return "CloudFormation and terraform would not order " + from + " against " + to + " (see TestHookChangesOrderedAgainstGrants)"
}

// reaches reports whether from depends on to, directly or not.
func reaches(deps map[string][]string, from, to string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(n string) bool {
		if seen[n] {
			return false
		}
		seen[n] = true
		for _, d := range deps[n] {
			if d == to || walk(d) {
				return true
			}
		}
		return false
	}
	return walk(from)
}

var subRef = regexp.MustCompile(`\$\{([A-Za-z0-9]+)(\.[A-Za-z0-9.]+)?\}`)

// cfnDeps are the resources a template resource depends on: DependsOn, Ref,
// Fn::GetAtt and Fn::Sub's ${...} naming a resource.
func cfnDeps(body any, res map[string]any) []string {
	var out []string
	add := func(id string) {
		if _, ok := res[id]; ok && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	for _, d := range listOrOne(asMap(body)["DependsOn"]) {
		add(stringify(d))
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				switch k {
				case "Ref":
					add(stringify(e))
				case "Fn::GetAtt":
					if l := asList(e); len(l) > 0 {
						add(stringify(l[0]))
					}
				case "Fn::Sub":
					s := stringify(e)
					if l := asList(e); len(l) > 0 {
						s = stringify(l[0])
					}
					for _, m := range subRef.FindAllStringSubmatch(s, -1) {
						add(m[1])
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(asMap(body)["Properties"])
	return out
}

// tfDeps are what a terraform block refers to: "<type>.<name>" of the
// resources its expressions and depends_on name, "local.<name>" of the
// locals.
func tfDeps(body *hclsyntax.Body) []string {
	var out []string
	var walk func(*hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, a := range b.Attributes {
			for _, tr := range a.Expr.Variables() {
				if len(tr) < 2 {
					continue
				}
				root := tr.RootName()
				attr, ok := tr[1].(hcl.TraverseAttr)
				if !ok || root == "var" || root == "data" || root == "each" || root == "count" {
					continue
				}
				if id := root + "." + attr.Name; !slices.Contains(out, id) {
					out = append(out, id)
				}
			}
		}
		for _, nb := range b.Blocks {
			walk(nb.Body)
		}
	}
	walk(body)
	return out
}
