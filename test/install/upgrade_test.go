package install

// terraform_upgrade: a user's upgrade of the module. The module and example
// of a previous release (fromRelease, from the repository's history), applied
// with the same override as terraform's path; then this commit's module and
// example put in their place over the same state and working directory, as a
// checkout of the new tag does; `terraform init`; `terraform plan -out` must neither replace
// the function's role, its EKS access entry nor the function (the
// actions of every resource are logged); `terraform apply` of that plan; the
// role and the access entry read back from the emulator are the same ones
// (RoleId, CreateDate; accessEntryArn, createdAt), the role still
// authenticates to the cluster as the group node-drainer, and what the
// upgrade converged to, read back as terraform's path reads its install, is
// what that path's fresh install of this commit created; then `terraform
// destroy` leaves nothing.
//
// It runs beside the two paths (TestDeploy): its function (upgradeFunction)
// and ASGs (upgradeASGs) are its own, and it leaves the cluster's RBAC
// objects to them (manage_rbac = false), so it does not drain: terraform's
// path deletes and recreates those objects while it runs.

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/test/harness"
)

// fromRelease is the release the upgrade starts from: 62850d5, the first
// release, whose module differs most from this commit's (no sweep rule, no
// alarms, rbac.yaml without the Leases' namespace, the FlowSchema and the
// PriorityLevelConfiguration, no moved block).
const fromRelease = "62850d5"

// fromReleaseFixes are the commits whose change to terraform/ the upgrade
// applies to fromRelease's module first, because using that module took
// them: a40db91, one line (manage_rbac's for_each was a conditional of
// inconsistent types, and `terraform plan` of 62850d5's module failed
// whatever manage_rbac was).
var fromReleaseFixes = []string{"a40db91"}

// upgradeFunction and upgradeASGs are the upgrade's own names: no prefix
// shared with the paths' node-drainer (their checks that nothing is left list
// rules, queues, log groups and alarms by prefix).
const upgradeFunction = "nd-upgrade"

var upgradeASGs = []string{"up-nodes", "up-nodes-b"}

// keptTypes are the resource types an upgrade must not replace: a replaced
// role or access entry leaves the function unauthenticated to the cluster
// until the new one exists; a replaced function drops events meanwhile.
var keptTypes = []string{"aws_iam_role", "aws_eks_access_entry", "aws_lambda_function"}

func terraformUpgrade(t *testing.T) {
	step(t, "terraform_upgrade", func(t *testing.T) string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		root, err := harness.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		old := releaseTree(t, ctx, root, fromRelease, fromReleaseFixes...)
		// a stand-in for the release's package (the emulator runs no code):
		// the same bootstrap in a zip of other bytes, so that the upgrade
		// changes the function's code as a real one does
		oldZip, err := zipBootstrap(bootstrap, "stand-in for the package of "+fromRelease)
		if err != nil {
			t.Fatal(err)
		}
		tf := newTerraformRoot(t, ctx, tfSetup{tree: old, zip: oldZip, asgs: upgradeASGs, functionName: upgradeFunction})
		createASGs(t, ctx, upgradeASGs)
		t.Logf("the module of %s with the fix of %v (without it, its plan fails), function_name = %q, manage_rbac = false "+
			"(rbac.yaml's objects are the harness's: terraform's path manages the same ones meanwhile)", fromRelease, fromReleaseFixes, upgradeFunction)

		destroyed := false
		defer func() {
			if !destroyed {
				waitPaths(ctx)
				dctx, dcancel := destroyContext(ctx)
				defer dcancel()
				if err := tf.run(dctx, "destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
					t.Logf("terraform destroy after a failure: %v", err)
				}
			}
		}()
		if err := tf.run(ctx, "init", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		if err := tf.run(ctx, "apply", "-auto-approve", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		before := tf.readKept(t, ctx)
		t.Logf("%s's deployment: %+v", fromRelease, before)

		// this commit's module and example over the same state
		if err := tf.replaceTree(root); err != nil {
			t.Fatal(err)
		}
		// with the inputs of terraform's path (its fresh install is what the
		// upgrade converges to): lease_namespace too, which the release's
		// module did not have
		if err := tf.writeOverride(tfSetup{functionName: upgradeFunction, leaseNamespace: deployLeaseNamespace}); err != nil {
			t.Fatal(err)
		}
		newZip, err := zipBootstrap(bootstrap, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := tf.setPackage(newZip); err != nil {
			t.Fatal(err)
		}
		// as a user does after moving the module's source to a new tag: the
		// new example calls a module the old one did not (modules/rbac)
		if err := tf.run(ctx, "init", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		const planFile = "upgrade.tfplan"
		if err := tf.run(ctx, "plan", "-input=false", "-no-color", "-out="+planFile); err != nil {
			t.Fatal(err)
		}
		actions := tf.planActions(t, ctx, planFile)
		if t.Failed() {
			return ""
		}
		if err := tf.run(ctx, "apply", "-input=false", "-no-color", planFile); err != nil {
			t.Fatal(err)
		}

		after := tf.readKept(t, ctx)
		t.Logf("after the upgrade: %+v", after)
		if after.RoleID != before.RoleID || after.RoleCreated != before.RoleCreated || after.RoleARN != before.RoleARN {
			t.Errorf("the role was replaced: %s (%s, created %s), was %s (%s, created %s)",
				after.RoleARN, after.RoleID, after.RoleCreated, before.RoleARN, before.RoleID, before.RoleCreated)
		}
		if after.AccessEntryARN != before.AccessEntryARN || after.AccessEntryCreated != before.AccessEntryCreated {
			t.Errorf("the access entry was replaced: %s (created %s), was %s (created %s)",
				after.AccessEntryARN, after.AccessEntryCreated, before.AccessEntryARN, before.AccessEntryCreated)
		}
		if after.AccessEntryModified != before.AccessEntryModified && slices.Equal(actions[accessEntryAddress], []string{"no-op"}) {
			t.Errorf("the access entry was modified (%s, was %s) though the plan left it alone", after.AccessEntryModified, before.AccessEntryModified)
		}
		if after.FunctionARN != before.FunctionARN {
			t.Errorf("the function is %s, was %s", after.FunctionARN, before.FunctionARN)
		}

		// the role, with the function's own client, is still the group
		// node-drainer in the cluster (through the access entry)
		user := roleIdentity(t, ctx, after.RoleARN)
		t.Logf("the role in the cluster: %s %v", user.Username, user.Groups)
		if !slices.Contains(user.Groups, harness.DrainerGroup) {
			t.Errorf("the upgraded role authenticates as %s %v, not in the group %s", user.Username, user.Groups, harness.DrainerGroup)
		}

		// what the upgrade converged to is a fresh install of this commit
		got, fn := tf.readBack(t, ctx)
		if fresh, err := tfInstalled.wait(ctx); err != nil {
			t.Errorf("waiting for terraform's path's install: %v", err)
		} else if fresh == nil {
			t.Logf("terraform's path installed nothing (its apply failed or did not run): the upgrade is not compared with a fresh install")
		} else {
			for _, d := range diffCreated(sides{"install", "upgrade"}, fresh, got) {
				t.Errorf("the upgrade differs from a fresh install of this commit: %s", d)
			}
		}

		waitPaths(ctx)
		destroyed = true
		dctx, dcancel := destroyContext(ctx)
		defer dcancel()
		if err := tf.run(dctx, "destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		tf.assertNothingLeft(t, dctx, fn)
		return ""
	})
}

// destroyContext bounds the upgrade's destroy on its own: waiting for the
// paths (waitPaths) may have used up the upgrade's context.
func destroyContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
}

// releaseTree extracts the terraform/ tree of the commit rev from the
// repository's history into a temporary directory, applies the changes the
// commits fixes made to terraform/, and returns that directory.
func releaseTree(t *testing.T, ctx context.Context, root, rev string, fixes ...string) string {
	t.Helper()
	git := func(stdin []byte, dir string, args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
		// no repository above dir is looked for: `git apply` in the
		// extracted tree patches its files, as outside any repository
		cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
		var stderr bytes.Buffer
		cmd.Stdin, cmd.Stderr = bytes.NewReader(stdin), &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	for _, c := range append([]string{rev}, fixes...) {
		if err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", c+"^{commit}").Run(); err != nil {
			shallow, _ := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
			t.Fatalf("the commit %s is not in the repository at %s (shallow: %s): the upgrade test needs the history "+
				"(the release %s's module): run it in a full `git clone`, not --depth nor a source archive", c, root, strings.TrimSpace(string(shallow)), rev)
		}
	}
	arc := git(nil, root, "archive", "--format=tar", rev, "terraform")
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(arc))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
					err = os.WriteFile(target, b, 0o644)
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range fixes {
		git(git(nil, root, "diff", c+"^", c, "--", "terraform"), dir, "apply", "-")
	}
	return dir
}

// replaceTree puts tree's terraform/ (the module and its examples) in place
// of the root's, keeping what terraform and the test wrote in the example's
// directory: the state, terraform's data directory and lock file, the
// override file.
func (r *terraformRoot) replaceTree(tree string) error {
	current := filepath.Join(r.work, "terraform")
	aside := filepath.Join(r.work, "terraform.previous")
	rel, err := filepath.Rel(current, r.dir)
	if err != nil {
		return err
	}
	if err := os.Rename(current, aside); err != nil {
		return err
	}
	if err := copyTree(filepath.Join(tree, "terraform"), current); err != nil {
		return err
	}
	for _, name := range []string{".terraform", ".terraform.lock.hcl", "terraform.tfstate", "terraform.tfstate.backup", overrideFile} {
		err := os.Rename(filepath.Join(aside, rel, name), filepath.Join(r.dir, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.RemoveAll(aside)
}

// accessEntryAddress is the access entry's address in the example.
const accessEntryAddress = "module.node_drainer.aws_eks_access_entry.function[0]"

// planActions reads the saved plan (terraform show -json), logs the actions
// of every resource that changes, and fails t for each resource of keptTypes
// the plan deletes (replaces or removes). It returns the actions by address.
func (r *terraformRoot) planActions(t *testing.T, ctx context.Context, planFile string) map[string][]string {
	t.Helper()
	b, err := r.stdout(ctx, "show", "-json", planFile)
	if err != nil {
		t.Fatal(err)
	}
	var plan struct {
		ResourceChanges []resourceChange `json:"resource_changes"`
	}
	if err := json.Unmarshal(b, &plan); err != nil {
		t.Fatalf("terraform show -json %s: %v", planFile, err)
	}
	actions := map[string][]string{}
	var lines []string
	unchanged := 0
	for _, rc := range plan.ResourceChanges {
		a := rc.Change.Actions
		actions[rc.Address] = a
		if slices.Equal(a, []string{"no-op"}) && rc.PreviousAddress == "" {
			unchanged++
		} else {
			line := fmt.Sprintf("  %-14s %s", strings.Join(a, ","), rc.Address)
			if rc.PreviousAddress != "" {
				line += " (moved from " + rc.PreviousAddress + ")"
			}
			if slices.Contains(a, "update") || slices.Contains(a, "delete") && slices.Contains(a, "create") {
				if c := rc.changed(); len(c) > 0 {
					line += ": " + strings.Join(c, ", ")
				} else {
					line += ": null for empty values only"
				}
			}
			if len(rc.Change.ReplacePaths) > 0 {
				line += fmt.Sprintf(" (replaced for %v)", rc.Change.ReplacePaths)
			}
			lines = append(lines, line)
		}
		if slices.Contains(keptTypes, rc.Type) && slices.Contains(a, "delete") {
			t.Errorf("the upgrade's plan deletes %s (actions %v): an upgrade must not replace the role, the access entry or the function", rc.Address, a)
		}
	}
	for _, ty := range keptTypes {
		if !slices.ContainsFunc(plan.ResourceChanges, func(rc resourceChange) bool { return rc.Type == ty }) {
			t.Errorf("the upgrade's plan has no %s", ty)
		}
	}
	t.Logf("what the upgrade from %s changes (%d resources unchanged):\n%s", fromRelease, unchanged, strings.Join(lines, "\n"))
	return actions
}

// resourceChange is one entry of a plan's resource_changes (terraform's JSON
// output format).
type resourceChange struct {
	Address         string `json:"address"`
	PreviousAddress string `json:"previous_address"`
	Type            string `json:"type"`
	Change          struct {
		Actions      []string       `json:"actions"`
		Before       map[string]any `json:"before"`
		After        map[string]any `json:"after"`
		AfterUnknown map[string]any `json:"after_unknown"`
		ReplacePaths [][]any        `json:"replace_paths"`
	} `json:"change"`
}

// changed are the attributes an update changes: those whose value differs
// before and after (null, "", [] and {} alike), or is known only after
// apply; a short scalar's values are shown (before -> after).
func (rc resourceChange) changed() []string {
	var keys []string
	for _, k := range unionKeys(rc.Change.After, rc.Change.AfterUnknown) {
		b, a, u := rc.Change.Before[k], rc.Change.After[k], unknown(rc.Change.AfterUnknown[k])
		if !u && (reflect.DeepEqual(b, a) || empty(b) && empty(a)) {
			continue
		}
		if bs, as := jsonText(b), jsonText(a); !u && scalar(b) && scalar(a) && len(bs)+len(as) < 160 {
			k += fmt.Sprintf(" (%s -> %s)", bs, as)
		}
		keys = append(keys, k)
	}
	return keys
}

func scalar(v any) bool {
	switch v.(type) {
	case nil, string, float64, bool:
		return true
	}
	return false
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// unknown says whether an after_unknown value has an unknown (true) in it.
func unknown(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case []any:
		return slices.ContainsFunc(x, unknown)
	case map[string]any:
		for _, e := range x {
			if unknown(e) {
				return true
			}
		}
	}
	return false
}

// kept is what must be the same before and after an upgrade, read back from
// the emulator.
type kept struct {
	FunctionARN, RoleARN, RoleID, RoleCreated               string
	AccessEntryARN, AccessEntryCreated, AccessEntryModified string
}

func (r *terraformRoot) readKept(t *testing.T, ctx context.Context) kept {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	fnARN, err := r.output(ctx, "function_arn")
	if err != nil {
		t.Fatal(err)
	}
	f, err := lambda.NewFromConfig(cfg).GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(fnARN)})
	if err != nil {
		t.Fatalf("GetFunction %s: %v", fnARN, err)
	}
	k := kept{FunctionARN: aws.ToString(f.Configuration.FunctionArn), RoleARN: aws.ToString(f.Configuration.Role)}
	role, err := iam.NewFromConfig(cfg).GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(k.RoleARN[strings.LastIndex(k.RoleARN, "/")+1:])})
	if err != nil {
		t.Fatalf("GetRole %s: %v", k.RoleARN, err)
	}
	k.RoleID, k.RoleCreated = aws.ToString(role.Role.RoleId), stamp(role.Role.CreateDate)
	ae, err := eks.NewFromConfig(cfg).DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(r.cluster), PrincipalArn: aws.String(k.RoleARN)})
	if err != nil {
		t.Fatalf("the role's access entry: %v", err)
	}
	k.AccessEntryARN = aws.ToString(ae.AccessEntry.AccessEntryArn)
	k.AccessEntryCreated, k.AccessEntryModified = stamp(ae.AccessEntry.CreatedAt), stamp(ae.AccessEntry.ModifiedAt)
	return k
}

func stamp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// roleIdentity is who roleARN is in the cluster: the function's own client
// (internal/cluster in EKS mode: the endpoint and CA from DescribeCluster,
// STS tokens of the role's credentials) asks the apiserver
// (SelfSubjectReview, which every authenticated user may create).
func roleIdentity(t *testing.T, ctx context.Context, roleARN string) authnv1.UserInfo {
	t.Helper()
	c, err := assumeRole(ctx, roleARN, "upgrade")
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.AWS.AWSConfig()
	cfg.Credentials = credentials.NewStaticCredentialsProvider(aws.ToString(c.AccessKeyId), aws.ToString(c.SecretAccessKey), aws.ToString(c.SessionToken))
	rc, err := cluster.RESTConfig(ctx, cluster.Source{ClusterName: harness.ClusterName}, eks.NewFromConfig(cfg), sts.NewFromConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the role %s in the cluster (SelfSubjectReview): %v", roleARN, err)
	}
	return review.Status.UserInfo
}
