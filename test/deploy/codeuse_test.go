package deploy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The permissions are derived from the code, not kept from memory: these
// tests read the function's Go source (functions/ and internal/, without
// tests, the test harness and this package) and compare what it calls with
// what the role and the ClusterRole grant.

// codeFiles parses the function's non-test Go files under root.
func codeFiles(t *testing.T, root string) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	for _, dir := range []string{"functions", "internal"} { // the product; test/ and hack/ never ship
		if _, err := os.Stat(filepath.Join(root, dir)); os.IsNotExist(err) {
			continue
		}
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files = append(files, f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) == 0 {
		t.Fatal("no Go source found")
	}
	return fset, files
}

// use is one place in the code that needs a permission. guards lists the
// settings of conditionalGrants the enclosing function reads (a condition on
// the call, checked by TestConditionalGrantsGuarded).
type use struct{ file, fn, guards string }

func (u use) String() string { return u.file + ":" + u.fn }

// funcName names the function declaration that contains pos.
func funcName(f *ast.File, pos token.Pos) string {
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || pos < fd.Pos() || pos > fd.End() {
			continue
		}
		if fd.Recv != nil && len(fd.Recv.List) > 0 {
			typ := fd.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				return id.Name + "." + fd.Name.Name
			}
		}
		return fd.Name.Name
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || pos < gd.Pos() || pos > gd.End() {
			continue
		}
		for _, sp := range gd.Specs {
			if ts, ok := sp.(*ast.TypeSpec); ok && pos >= ts.Pos() && pos <= ts.End() {
				return ts.Name.Name + " (type)"
			}
		}
	}
	return "(package level)"
}

// awsService maps the AWS SDK for Go v2 service packages the function may
// import to their IAM service prefixes.
var awsService = map[string]string{
	"github.com/aws/aws-sdk-go-v2/service/autoscaling":    "autoscaling",
	"github.com/aws/aws-sdk-go-v2/service/ec2":            "ec2",
	"github.com/aws/aws-sdk-go-v2/service/eks":            "eks",
	"github.com/aws/aws-sdk-go-v2/service/eventbridge":    "events",
	"github.com/aws/aws-sdk-go-v2/service/lambda":         "lambda",
	"github.com/aws/aws-sdk-go-v2/service/ssm":            "ssm",
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager": "secretsmanager",
	"github.com/aws/aws-sdk-go-v2/service/sts":            "sts",
}

// iamActionOf is the IAM action of an operation where the names differ.
var iamActionOf = map[string]string{
	"lambda:Invoke": "lambda:InvokeFunction",
}

// noPermissionNeeded are operations AWS authorizes without any IAM grant.
var noPermissionNeeded = map[string]string{
	// "No permissions are required to perform this operation" (STS API
	// reference). The function never calls it: aws-iam-authenticator presigns
	// it into the EKS token (cluster.tokenSource.Token), and the API server
	// calls it.
	"sts:GetCallerIdentity": "presigned into the Kubernetes token only",
}

// platformActions are used with the function's role by the Lambda service
// itself, not by the code.
var platformActions = map[string]string{
	"logs:CreateLogStream": "Lambda writes the function's logs with its role",
	"logs:PutLogEvents":    "Lambda writes the function's logs with its role",
	"sqs:SendMessage":      "Lambda sends failed asynchronous invocations to the on-failure destination (the DLQ) with the role",
	"kms:GenerateDataKey":  "Lambda's SendMessage to a dead-letter queue encrypted with a customer key (DeadLetterQueueKmsKeyArn)",
	"kms:Decrypt":          "Lambda's SendMessage to a dead-letter queue encrypted with a customer key (DeadLetterQueueKmsKeyArn)",
}

// awsCalls finds every AWS operation the code refers to: each <Op>Input type
// of an SDK service package, in a call or in the interface declaring it.
func awsCalls(t *testing.T, root string) map[string][]use {
	t.Helper()
	fset, files := codeFiles(t, root)
	calls := map[string][]use{}
	for _, f := range files {
		imports := map[string]string{} // local name -> IAM prefix
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(path, "github.com/aws/aws-sdk-go-v2/service/") || strings.Count(path, "/") != 4 {
				continue
			}
			prefix, ok := awsService[path]
			if !ok {
				t.Errorf("%s imports %s: add its IAM prefix to awsService", fset.Position(imp.Pos()).Filename, path)
				continue
			}
			name := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imports[name] = prefix
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || imports[pkg.Name] == "" || !strings.HasSuffix(sel.Sel.Name, "Input") {
				return true
			}
			action := imports[pkg.Name] + ":" + strings.TrimSuffix(sel.Sel.Name, "Input")
			if a, ok := iamActionOf[action]; ok {
				action = a
			}
			u := use{fset.Position(sel.Pos()).Filename, funcName(f, sel.Pos()), ""}
			for _, seen := range calls[action] {
				if seen == u {
					return true
				}
			}
			calls[action] = append(calls[action], u)
			return true
		})
	}
	return calls
}

// neededActions are the actions the code's calls need, plus those the Lambda
// service uses with the role.
func neededActions(calls map[string][]use) map[string]bool {
	needed := map[string]bool{}
	for action := range calls {
		if _, ok := noPermissionNeeded[action]; !ok {
			needed[action] = true
		}
	}
	for action := range platformActions {
		needed[action] = true
	}
	return needed
}

// iamProblems lists the actions s lacks for calls, and those it grants that
// nothing uses.
func iamProblems(s *Spec, calls map[string][]use) []string {
	var out []string
	needed := neededActions(calls)
	granted := map[string]bool{}
	for _, a := range s.Actions() {
		granted[a] = true
		if !needed[a] {
			out = append(out, fmt.Sprintf("%s grants %s, which neither the code nor the Lambda service uses", s.Source, a))
		}
	}
	for _, a := range sortedKeys(needed) {
		if !granted[a] {
			out = append(out, fmt.Sprintf("%s does not grant %s, used by %v", s.Source, a, calls[a]))
		}
	}
	return out
}

// TestIAMActionsMatchCode: every AWS call of the code has its action in both
// descriptions, and every action granted is used (by the code, or by the
// Lambda service with the role).
func TestIAMActionsMatchCode(t *testing.T) {
	calls := awsCalls(t, repoRoot)
	for _, action := range sortedKeys(calls) {
		if why, ok := noPermissionNeeded[action]; ok {
			t.Logf("%s: no IAM permission needed (%s): %v", action, why, calls[action])
		} else {
			t.Logf("%s: %v", action, calls[action])
		}
	}
	sam, tf := load(t, repoRoot)
	for _, s := range []*Spec{sam, tf} {
		for _, p := range iamProblems(s, calls) {
			t.Error(p)
		}
	}
	// the contract in wantActions is the same set
	if got := sortedKeys(neededActions(calls)); strings.Join(got, ",") != strings.Join(wantActions, ",") {
		t.Errorf("actions the code and Lambda use\n got %v\nwant %v (wantActions)", got, wantActions)
	}
	// the calls the templates are built around are still found by the scan
	for _, a := range []string{"autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat",
		"autoscaling:DescribeLifecycleHooks", "ec2:DescribeInstances", "eks:DescribeCluster", "lambda:InvokeFunction",
		"ssm:GetParameter", "secretsmanager:GetSecretValue"} {
		if len(calls[a]) == 0 {
			t.Errorf("the code no longer refers to %s: is the scan still finding the calls?", a)
		}
	}
}

// grant is one (API group, resource, verb) the RBAC gives, in every
// namespace (ns empty: a ClusterRole's) or in the namespace ns (a Role's).
// In the code's requests ns is kube-node-lease, leaseNamespace (the
// configured LEASE_NAMESPACE) or empty (any namespace, or cluster-scoped).
type grant struct{ group, resource, verb, ns string }

func (g grant) String() string {
	r := g.resource
	if g.group != "" {
		r = g.group + "/" + r
	}
	r += " " + g.verb
	if g.ns != "" {
		r += " in namespace " + g.ns
	}
	return r
}

// leaseNamespace stands for the configured LEASE_NAMESPACE in the code's
// requests.
const leaseNamespace = "$LEASE_NAMESPACE"

// namespacedTo says in which namespace the code asks for a resource whose
// namespace argument is not kube-node-lease: the node-drainer's own Leases
// are only ever in LEASE_NAMESPACE (internal/lease, the sweep).
var namespacedTo = map[string]string{"coordination.k8s.io/leases": leaseNamespace}

// conditionalGrants are requests the code makes only with a setting on (the
// config.Config field): the RBAC grants them only then.
var conditionalGrants = map[grant]string{
	{"", "nodes", "delete", ""}: "DeleteTerminatedNodes",
}

// requestNamespace is the namespace a typed client's resource call is made
// in (nsArg: the argument of Leases(...), Pods(...); nil for cluster-scoped
// resources).
func requestNamespace(group, resource string, nsArg ast.Expr) string {
	switch a := nsArg.(type) {
	case *ast.SelectorExpr:
		if a.Sel.Name == "NamespaceNodeLease" {
			return "kube-node-lease"
		}
	case *ast.BasicLit:
		if a.Value == `"kube-node-lease"` {
			return "kube-node-lease"
		}
	case nil:
		return ""
	}
	key := resource
	if group != "" {
		key = group + "/" + resource
	}
	return namespacedTo[key]
}

// guardsOf lists the settings of conditionalGrants that the function
// declaration around pos reads (as x.Setting).
func guardsOf(f *ast.File, pos token.Pos) string {
	var found []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || pos < fd.Pos() || pos > fd.End() {
			continue
		}
		ast.Inspect(fd, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				for _, setting := range conditionalGrants {
					if sel.Sel.Name == setting && !slices.Contains(found, setting) {
						found = append(found, setting)
					}
				}
			}
			return true
		})
	}
	sort.Strings(found)
	return strings.Join(found, ",")
}

// client-go typed clients: the group-version accessor's API group.
var kubeGroups = map[string]string{
	"CoreV1": "", "AppsV1": "apps", "PolicyV1": "policy", "PolicyV1beta1": "policy",
	"StorageV1": "storage.k8s.io", "EventsV1": "events.k8s.io", "CoordinationV1": "coordination.k8s.io",
}

// client-go typed client methods and the RBAC verb each is authorized as.
var kubeVerbs = map[string]string{
	"Get": "get", "List": "list", "Watch": "watch", "Create": "create", "Update": "update",
	"Patch": "patch", "Apply": "patch", "Delete": "delete", "DeleteCollection": "deletecollection",
}

// kubectlHelper lists what each k8s.io/kubectl/pkg/drain.Helper method the
// code calls asks of the API server (read from kubectl's drain.go and
// filters.go, the version in go.mod).
var kubectlHelper = map[string][]grant{
	// Pods("").List by spec.nodeName (chunked), then daemonSetFilter's
	// AppsV1().DaemonSets(ns).Get for each DaemonSet-owned pod
	"GetPodsForDeletion": {{"", "pods", "list", ""}, {"apps", "daemonsets", "get", ""}},
	// PolicyV1().Evictions(ns).Evict (the code always passes policy/v1)
	"EvictPod": {{"", "pods/eviction", "create", ""}},
	// Pods(ns).Delete
	"DeletePod": {{"", "pods", "delete", ""}},
}

// kubectlUnsupported are Helper entry points that ask for more (discovery,
// pods get, node patch) than the table above describes.
var kubectlUnsupported = []string{"DeleteOrEvictPods", "RunNodeDrain", "RunCordonOrUncordon", "CheckEvictionSupport", "PatchOrReplace", "PatchOrReplaceWithContext"}

// kubeCalls finds every Kubernetes API request of the code: typed client
// chains such as c.CoreV1().Nodes().Get(...), and the kubectl drain Helper
// methods called.
func kubeCalls(t *testing.T, root string) map[grant][]use {
	t.Helper()
	fset, files := codeFiles(t, root)
	calls := map[grant][]use{}
	add := func(f *ast.File, pos token.Pos, g grant) {
		u := use{fset.Position(pos).Filename, funcName(f, pos), guardsOf(f, pos)}
		for _, seen := range calls[g] {
			if seen == u {
				return
			}
		}
		calls[g] = append(calls[g], u)
	}
	// method returns the selector name and receiver of a call x.Name(...)
	method := func(e ast.Expr) (string, ast.Expr, bool) {
		call, ok := e.(*ast.CallExpr)
		if !ok {
			return "", nil, false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return "", nil, false
		}
		return sel.Sel.Name, sel.X, true
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			verbName, recv, ok := method(call)
			if !ok {
				return true
			}
			if gs, ok := kubectlHelper[verbName]; ok {
				for _, g := range gs {
					add(f, call.Pos(), g)
				}
				return true
			}
			for _, u := range kubectlUnsupported {
				if verbName == u {
					t.Errorf("%s: kubectl drain Helper.%s: describe its requests in kubectlHelper", fset.Position(call.Pos()), u)
				}
			}
			resName, gvCall, ok := method(recv)
			if !ok {
				return true
			}
			var nsArg ast.Expr
			if rc := recv.(*ast.CallExpr); len(rc.Args) == 1 {
				nsArg = rc.Args[0]
			}
			gvName, _, ok := method(gvCall)
			if !ok {
				return true
			}
			group, ok := kubeGroups[gvName]
			if !ok {
				return true
			}
			verb, resource := kubeVerbs[verbName], strings.ToLower(resName)
			switch {
			case resName == "Evictions" && verbName == "Evict":
				// a subresource of core pods, whatever the Eviction's group
				group, verb, resource = "", "create", "pods/eviction"
			case strings.HasSuffix(verbName, "Status") && kubeVerbs[strings.TrimSuffix(verbName, "Status")] != "":
				verb, resource = kubeVerbs[strings.TrimSuffix(verbName, "Status")], resource+"/status"
			case verbName == "Patch" && len(call.Args) > 5:
				// Patch(ctx, name, type, data, opts, subresources...): the
				// subresource's grant, not the resource's
				lit, ok := call.Args[5].(*ast.BasicLit)
				if !ok {
					t.Errorf("%s: %s().%s().Patch: a subresource not written as a literal", fset.Position(call.Pos()), gvName, resName)
					return true
				}
				verb, resource = "patch", resource+"/"+strings.Trim(lit.Value, "`\"")
			case verb == "":
				t.Errorf("%s: %s().%s().%s: unknown client-go method, add it to kubeVerbs", fset.Position(call.Pos()), gvName, resName, verbName)
				return true
			}
			add(f, call.Pos(), grant{group, resource, verb, requestNamespace(group, resource, nsArg)})
			return true
		})
	}
	return calls
}

// knownUnusedGrants are what terraform/kubernetes/*.yaml grant and the code
// does not use (checked by TestRBACFollowsConfig). The RBAC is not this
// package's to change: they are reported, not removed. A grant that becomes
// used, or is dropped, must leave this list.
var knownUnusedGrants = map[grant]string{}

// rbacSettings are the configurations the RBAC is checked for: the default
// lease namespace and another, node deletion off (the default) and on.
var rbacSettings = []RBACSetting{
	{"node-drainer", false}, {"node-drainer", true}, {"drains", false}, {"drains", true},
}

// needs are the code's requests under s: the lease namespace resolved,
// conditional requests only with their setting on.
func needs(calls map[grant][]use, s RBACSetting) map[grant][]use {
	on := map[string]bool{"DeleteTerminatedNodes": s.DeleteTerminatedNodes}
	out := map[grant][]use{}
	for g, uses := range calls {
		if setting, ok := conditionalGrants[g]; ok && !on[setting] {
			continue
		}
		if g.ns == leaseNamespace {
			g.ns = s.LeaseNamespace
		}
		out[g] = append(out[g], uses...)
	}
	return out
}

// granted is what rbac gives the group: a ClusterRole bound by a
// ClusterRoleBinding in every namespace, a (Cluster)Role bound by a
// RoleBinding in the binding's namespace.
func granted(rbac *RBAC, group string) map[grant]bool {
	out := map[grant]bool{}
	for _, b := range rbac.Bindings {
		if !slices.Contains(b.Groups, group) {
			continue
		}
		for _, r := range rbac.Rules {
			if r.Role != b.Role || (strings.HasPrefix(r.Role, "Role/") && r.Namespace != b.Namespace) {
				continue
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out[grant{g, res, v, b.Namespace}] = true
					}
				}
			}
		}
	}
	return out
}

// rbacProblems lists the requests of need that rbac does not grant the group
// node-drainer (each a 403 in production), the grants nothing in need uses
// that are not in knownUnusedGrants (a grant in every namespace where one
// namespace is needed counts as unused), and Roles in namespaces that do not
// exist.
func rbacProblems(rbac *RBAC, need map[grant][]use) []string {
	var out []string
	have := granted(rbac, "node-drainer")
	for g, uses := range need {
		cluster := g
		cluster.ns = ""
		if !have[g] && !have[cluster] {
			out = append(out, fmt.Sprintf("does not grant %s, used by %v", g, uses))
		}
	}
	for g := range have {
		_, isUsed := need[g]
		_, known := knownUnusedGrants[g]
		switch {
		case !isUsed && !known:
			out = append(out, fmt.Sprintf("grants %s, which the code does not use: report it, or add it with the reason to knownUnusedGrants", g))
		case isUsed && known:
			out = append(out, fmt.Sprintf("%s is used now (%v): remove it from knownUnusedGrants", g, need[g]))
		}
	}
	for g := range knownUnusedGrants {
		if !have[g] {
			out = append(out, fmt.Sprintf("%s is no longer granted: remove it from knownUnusedGrants", g))
		}
	}
	for _, r := range rbac.Rules {
		if r.Namespace != "" && r.Namespace != "kube-node-lease" && !slices.Contains(rbac.Namespaces, r.Namespace) {
			out = append(out, fmt.Sprintf("%s is in namespace %s, which nothing creates", r.Role, r.Namespace))
		}
	}
	sort.Strings(out)
	return out
}

// TestRBACFollowsConfig: for each setting (the default lease namespace and
// another, node deletion on and off), what a user applies as the manifests
// say (RBACFor; terraform's modules/rbac applies the same) grants every
// Kubernetes request the code makes under that setting, in the namespace
// it makes it in, and nothing else: the Leases only in kube-node-lease (read)
// and in LEASE_NAMESPACE, nodes: delete only with DELETE_TERMINATED_NODES.
func TestRBACFollowsConfig(t *testing.T) {
	calls := kubeCalls(t, repoRoot)
	if len(calls) == 0 {
		t.Fatal("no Kubernetes request found in the code: the scan is broken")
	}
	var used []string
	for g, uses := range calls {
		used = append(used, fmt.Sprintf("%s: %v", g, uses))
	}
	sort.Strings(used)
	t.Logf("Kubernetes requests of the code:\n%s", strings.Join(used, "\n"))
	for _, want := range []grant{{"coordination.k8s.io", "leases", "get", "kube-node-lease"}, {"coordination.k8s.io", "leases", "create", leaseNamespace}} {
		if _, ok := calls[want]; !ok {
			t.Errorf("the scan no longer finds %s: are the namespaces still told apart?", want)
		}
	}
	for _, s := range rbacSettings {
		t.Run(s.String(), func(t *testing.T) {
			rbac, err := RBACFor(filepath.Join(repoRoot, "terraform", "kubernetes"), s)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rbacProblems(rbac, needs(calls, s)) {
				t.Errorf("the RBAC for %s %s", s, p)
			}
		})
	}
}

// TestConditionalGrantsGuarded: each request granted only with a setting is
// made in a function that reads the setting.
func TestConditionalGrantsGuarded(t *testing.T) {
	calls := kubeCalls(t, repoRoot)
	for g, setting := range conditionalGrants {
		if len(calls[g]) == 0 {
			t.Errorf("%s (only with %s) is no longer requested: remove it from conditionalGrants", g, setting)
		}
		for _, u := range calls[g] {
			if slices.Contains(strings.Split(u.guards, ","), setting) {
				continue
			}
			// a package's function that only makes the request (node.Delete)
			// is guarded when each of its callers reads the setting
			callers := callersOf(t, repoRoot, filepath.Base(filepath.Dir(u.file)), u.fn)
			unguarded := slices.DeleteFunc(slices.Clone(callers), func(c use) bool {
				return slices.Contains(strings.Split(c.guards, ","), setting)
			})
			if len(callers) == 0 || len(unguarded) > 0 {
				t.Errorf("%s is requested in %s, which does not read %s, nor do its callers %v: it would be refused with the setting off", g, u, setting, unguarded)
			}
		}
	}
}

// callersOf lists the functions of the product that call pkg.fn (a
// package-level function), each with the settings it reads.
func callersOf(t *testing.T, root, pkg, fn string) []use {
	t.Helper()
	if strings.Contains(fn, ".") {
		return nil // a method: its callers are not found by name
	}
	fset, files := codeFiles(t, root)
	var out []use
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != fn {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg {
				out = append(out, use{fset.Position(call.Pos()).Filename, funcName(f, call.Pos()), guardsOf(f, call.Pos())})
			}
			return true
		})
	}
	return out
}

// The scans find a new call, and the checks fail when one side alone changes.
func TestDetectsPermissionDrift(t *testing.T) {
	t.Run("scan finds new AWS and Kubernetes calls", func(t *testing.T) {
		root := t.TempDir()
		src := `package x

import (
	"context"

	as "github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"k8s.io/client-go/kubernetes"
)

func f(ctx context.Context, api *as.Client, c kubernetes.Interface) {
	api.DescribeAutoScalingGroups(ctx, &as.DescribeAutoScalingGroupsInput{})
	c.CoreV1().ConfigMaps("ns").Get(ctx, "x", metav1.GetOptions{})
	c.CoreV1().Nodes().UpdateStatus(ctx, nil, metav1.UpdateOptions{})
	c.PolicyV1().Evictions("ns").Evict(ctx, nil)
}
`
		if err := os.MkdirAll(filepath.Join(root, "internal", "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "internal", "x", "x.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		aws := awsCalls(t, root)
		if u := aws["autoscaling:DescribeAutoScalingGroups"]; len(u) != 1 || u[0].String() != "internal/x/x.go:f" {
			t.Errorf("AWS calls = %v, want autoscaling:DescribeAutoScalingGroups in internal/x/x.go:f", aws)
		}
		kube := kubeCalls(t, root)
		for _, g := range []grant{{"", "configmaps", "get", ""}, {"", "nodes/status", "update", ""}, {"", "pods/eviction", "create", ""}} {
			if len(kube[g]) != 1 {
				t.Errorf("Kubernetes calls = %v, want %s", kube, g)
			}
		}
	})

	calls := awsCalls(t, repoRoot)
	kube := kubeCalls(t, repoRoot)
	tests := []struct{ name, file, old, new, want string }{
		{"DescribeLifecycleHooks dropped in terraform", iamTF,
			`actions   = ["autoscaling:DescribeLifecycleHooks"]`, `actions   = ["ec2:DescribeInstances"]`,
			"terraform does not grant autoscaling:DescribeLifecycleHooks"},
		{"unused action in SAM", samFile,
			"Action: autoscaling:DescribeLifecycleHooks", "Action: [autoscaling:DescribeLifecycleHooks, autoscaling:DescribeScalingActivities]",
			"sam grants autoscaling:DescribeScalingActivities, which neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t)
			mutate(t, root, tt.file, tt.old, tt.new)
			sam, tf := load(t, root)
			problems := append(iamProblems(sam, calls), iamProblems(tf, calls)...)
			if joined := strings.Join(problems, "\n"); !strings.Contains(joined, tt.want) {
				t.Errorf("problems do not mention %q:\n%s", tt.want, joined)
			}
		})
	}

	// the RBAC, for one setting each
	off, on := RBACSetting{"drains", false}, RBACSetting{"drains", true}
	rbacTests := []struct {
		name, file, old, new string
		setting              RBACSetting
		want                 string
	}{
		{"nodes update dropped from the ClusterRole", rbacYAML,
			`verbs: ["get", "list", "watch", "update"]`, `verbs: ["get", "list", "watch"]`, off,
			"does not grant nodes update, used by [internal/node/marks.go:update]"},
		{"PDB watch dropped from the ClusterRole", rbacYAML,
			"resources: [\"poddisruptionbudgets\"]\n    verbs: [\"list\", \"watch\"]",
			"resources: [\"poddisruptionbudgets\"]\n    verbs: [\"list\"]", off,
			"does not grant policy/poddisruptionbudgets watch"},
		{"VolumeAttachment watch dropped from the ClusterRole", rbacYAML,
			"resources: [\"volumeattachments\"]\n    verbs: [\"list\", \"watch\", \"delete\"]",
			"resources: [\"volumeattachments\"]\n    verbs: [\"list\", \"delete\"]", off,
			"does not grant storage.k8s.io/volumeattachments watch"},
		{"unused verb added to the ClusterRole", rbacYAML,
			"    resources: [\"daemonsets\"]\n    verbs: [\"get\"]",
			"    resources: [\"daemonsets\"]\n    verbs: [\"get\", \"list\"]", off,
			"grants apps/daemonsets list, which the code does not use"},
		{"nodes delete back in the ClusterRole", rbacYAML,
			`verbs: ["get", "list", "watch", "update"]`, `verbs: ["get", "list", "watch", "update", "delete"]`, off,
			"grants nodes delete, which the code does not use"},
		{"nodes delete dropped from its file", rbacDeleteNodesYAML,
			`verbs: ["delete"]`, `verbs: ["get"]`, on,
			"does not grant nodes delete"},
		{"kubelet Leases read cluster-wide", rbacYAML,
			"    resources: [\"events\"]\n    verbs: [\"create\"]\n",
			"    resources: [\"events\"]\n    verbs: [\"create\"]\n  - apiGroups: [\"coordination.k8s.io\"]\n    resources: [\"leases\"]\n    verbs: [\"get\", \"list\", \"watch\"]\n", off,
			"grants coordination.k8s.io/leases get, which the code does not use"},
		{"kubelet Leases' Role in another namespace", rbacYAML,
			"  name: node-drainer-kubelet-leases\n  namespace: kube-node-lease\n  labels:\n    app.kubernetes.io/name: node-drainer\nrules:",
			"  name: node-drainer-kubelet-leases\n  namespace: kube-system\n  labels:\n    app.kubernetes.io/name: node-drainer\nrules:", off,
			"does not grant coordination.k8s.io/leases get in namespace kube-node-lease"},
		{"lease namespace's Role dropped a verb", rbacLeaseYAML,
			`verbs: ["get", "list", "watch", "create", "update", "delete"]`, `verbs: ["get", "list", "watch", "update", "delete"]`, off,
			"does not grant coordination.k8s.io/leases create in namespace drains"},
	}
	for _, tt := range rbacTests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t)
			mutate(t, root, tt.file, tt.old, tt.new)
			rbac, err := RBACFor(filepath.Join(root, "terraform", "kubernetes"), tt.setting)
			if err != nil {
				t.Fatal(err)
			}
			problems := rbacProblems(rbac, needs(kube, tt.setting))
			if joined := strings.Join(problems, "\n"); !strings.Contains(joined, tt.want) {
				t.Errorf("problems for %s do not mention %q:\n%s", tt.setting, tt.want, joined)
			}
		})
	}
	t.Run("lease namespace hard-coded", func(t *testing.T) {
		root := copyTree(t)
		mutate(t, root, rbacLeaseYAML, "kind: Role\nmetadata:\n  name: node-drainer\n", "kind: Role\nmetadata:\n  name: node-drainer\n  namespace: node-drainer\n")
		if _, err := RBACFor(filepath.Join(root, "terraform", "kubernetes"), off); err == nil || !strings.Contains(err.Error(), "kubectl refuses it") {
			t.Errorf("a Role with its namespace written, applied into drains: error %v, want kubectl's refusal", err)
		}
	})
	t.Run("conditional request without its guard", func(t *testing.T) {
		root := t.TempDir()
		src := `package x

import (
	"context"

	"k8s.io/client-go/kubernetes"
)

func f(ctx context.Context, c kubernetes.Interface, cfg struct{ DeleteTerminatedNodes bool }) {
	if cfg.DeleteTerminatedNodes {
		c.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{})
	}
}

func g(ctx context.Context, c kubernetes.Interface) {
	c.CoreV1().Nodes().Delete(ctx, "b", metav1.DeleteOptions{})
	c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "n", metav1.GetOptions{})
	c.CoordinationV1().Leases(ns).Create(ctx, nil, metav1.CreateOptions{})
}
`
		if err := os.MkdirAll(filepath.Join(root, "internal", "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "internal", "x", "x.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		calls := kubeCalls(t, root)
		uses := calls[grant{"", "nodes", "delete", ""}]
		if len(uses) != 2 || uses[0].guards == uses[1].guards {
			t.Errorf("node deletes %+v: want one in f reading DeleteTerminatedNodes, one in g not", uses)
		}
		for _, g := range []grant{{"coordination.k8s.io", "leases", "get", "kube-node-lease"}, {"coordination.k8s.io", "leases", "create", leaseNamespace}} {
			if len(calls[g]) != 1 {
				t.Errorf("Kubernetes calls = %v, want %s", calls, g)
			}
		}
	})
}

// permissionsDoc holds the permission tables, relative to the repository root.
const permissionsDoc = "docs/safety.md"

// TestPermissionTablesNameEveryGrant: the permission tables of docs/safety.md list
// every IAM action and every Kubernetes resource the code uses.
func TestPermissionTablesNameEveryGrant(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(permissionsDoc)))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, a := range wantActions {
		if !strings.Contains(doc, "`"+a+"`") {
			t.Errorf("%s does not list `%s`", permissionsDoc, a)
		}
	}
	for g := range kubeCalls(t, repoRoot) {
		if !strings.Contains(doc, "`"+g.resource+"`") {
			t.Errorf("%s does not list `%s` (%s)", permissionsDoc, g.resource, g)
		}
	}
}
