package install

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// The terraform path: terraform/examples/eks, unchanged, applied against the
// AWS emulator and the harness's apiserver. The test copies terraform/ (the
// module and its examples) to a temporary directory, puts the package where
// the example expects it (dist/node-drainer-arm64.zip beside terraform/) and
// adds one override file to the example (terraform's *_override.tf merging)
// that only points the providers at the emulator and the harness: the aws
// provider's endpoints and test credentials, and the kubernetes provider's
// exec credential plugin swapped from `aws eks get-token` to one that prints
// the harness's admin token. The cluster's endpoint and CA still come from
// data.aws_eks_cluster, which the emulator answers with the harness's.

func init() { paths["terraform"] = terraformPath }

// tfASGs are the example's asg_names: two, as the SAM path's AsgNames, so
// that both paths are given the same shape of input. The first is the
// drain's scene.
var tfASGs = []string{"tf-nodes", "tf-nodes-b"}

func terraformPath(t *testing.T) *created {
	pathT := t
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	defer tfInstalled.set(nil) // no fresh install for the upgrade to compare with, unless set below
	tf := newTerraformRoot(t, ctx, tfSetup{asgs: tfASGs, manageRBAC: true, leaseNamespace: deployLeaseNamespace})
	// instance 0 for terraform_drain, 2 and 3 for metrics_every_level, the
	// last for outcome_events_terraform
	scene := newDrainScene(t, ctx, tfASGs[0], 3+len(metricsLevels))
	createASGs(t, ctx, tfASGs[1:])

	var got *created
	var fn deployedFunction
	destroyed := false
	defer func() {
		if !destroyed {
			// leave nothing for the SAM path whatever failed
			if err := tf.run(ctx, "destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
				t.Logf("terraform destroy after a failure: %v", err)
			}
		}
		if err := env.ApplyRBAC(ctx); err != nil {
			t.Errorf("putting the harness's RBAC back: %v", err)
		}
	}()
	if !step(t, "terraform_apply", func(t *testing.T) string {
		if err := tf.run(ctx, "init", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		if err := tf.run(ctx, "apply", "-auto-approve", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		got, fn = tf.readBack(t, ctx)
		if lambdaSvc != nil && lambdaSvc.ran(fn.Name) == 0 {
			t.Errorf("terraform apply did not invoke the function (the module's hooks resource checks its settings on create)")
		}
		return ""
	}) {
		return nil
	}
	tfInstalled.set(got)
	drained := step(t, "terraform_drain", func(t *testing.T) string {
		drainWith(t, ctx, scene, fn)
		return ""
	})
	step(t, "rbac_follows_config", func(t *testing.T) string {
		if !drained {
			t.Fatalf("terraform_drain failed: no drain under LEASE_NAMESPACE=%s to show", deployLeaseNamespace)
		}
		checkRBACFollowsConfig(t, ctx, scene)
		return ""
	})
	step(t, "tag_discovery_terraform", func(t *testing.T) string {
		checkTagDiscovery(t, ctx, "tf", fn)
		return ""
	})
	step(t, "metrics_every_level", func(t *testing.T) string {
		if !drained {
			t.Fatal("terraform_drain failed: the deploy is not known to drain")
		}
		checkMetricsEveryLevel(t, ctx, scene, 2, terraformLevel(t, ctx, tf, fn))
		return ""
	})
	step(t, "outcome_events_terraform", func(t *testing.T) string {
		if !drained {
			t.Fatal("terraform_drain failed: the deploy is not known to drain")
		}
		checkOutcomeEvents(t, ctx, "tf-oncall", func(bus, target string) deployedFunction {
			if err := tf.writeOverride(tfSetup{manageRBAC: tf.manageRBAC, leaseNamespace: deployLeaseNamespace, outcomeBus: bus, outcomeTarget: target}); err != nil {
				t.Fatal(err)
			}
			if err := tf.run(ctx, "apply", "-auto-approve", "-input=false", "-no-color"); err != nil {
				t.Fatal(err)
			}
			return redeployed(t, ctx, fn)
		}, scene, 2+len(metricsLevels))
		return ""
	})
	var sc *uninstallScene
	step(t, "terraform_destroy", func(t *testing.T) string {
		// a tagged group the sweep put the terminate hook on, another
		// tool's hook on it and on the listed groups (uninstall_test.go):
		// the destroy removes our hooks (the module's aws_lambda_invocation
		// runs the function's removal), and keeps another tool's
		sc = prepareUninstall(t, pathT, ctx, "tf", fn, tfASGs)
		ran := lambdaSvc.ran(fn.Name)
		destroyed = true
		// a sweep Lambda runs after the removal (one retried, or started
		// by the schedule in those seconds): it must put no hook back
		lambdaSvc.sweepAfterDelete(fn.Name, sc.tagged)
		if err := tf.run(ctx, "destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		tf.assertNothingLeft(t, ctx, fn)
		if lambdaSvc.ran(fn.Name) == ran {
			t.Errorf("terraform destroy did not invoke the function (its hooks resource, lifecycle_scope CRUD)")
		}
		// the removal itself (what the sweep after it does is
		// uninstall_clean_terraform's)
		if got, ok := lambdaSvc.hooksAfterRemoval(fn.Name); !ok || !slices.Equal(got, []string{otherToolHook}) {
			t.Errorf("hooks on the tagged group %s right after the destroy's removal: %v (read %v); want only %s (the sweep's %s removed)", sc.tagged, got, ok, otherToolHook, fn.TerminateHook)
		}
		// the order of the destroy: the sweep's rule gone before the
		// removal, the terminate hook's rule and target still there
		if r, ok := lambdaSvc.rulesAtDelete(fn.Name); !ok {
			t.Errorf("terraform destroy sent the function no delete")
		} else if r.SweepRule || !r.TerminateRuleRead || r.TerminateTargets == 0 {
			t.Errorf("at the removal of the hooks: sweep rule present %v, terminate-hook rule read %v with %d targets; want the sweep's rule gone and the terminate-hook rule still targeting the function",
				r.SweepRule, r.TerminateRuleRead, r.TerminateTargets)
		}
		return ""
	})
	if sc != nil && destroyed {
		step(t, "uninstall_clean_terraform", func(t *testing.T) string {
			// the scene's groups go with this step (pathT's cleanup, at
			// the end of TestDeploy, is for a destroy that stopped
			// before): SAM's uninstall_clean reads every tagged group
			deleteGroupsAtEnd(t, ctx, sc.tagged, sc.foreign)
			checkUninstallClean(t, ctx, sc)
			return ""
		})
	}
	return got
}

// terraformRoot is the copied example, ready to run terraform in.
type terraformRoot struct {
	t          *testing.T
	work       string   // holds terraform/ (the module and its examples) and dist/ (the package)
	dir        string   // the example's directory (terraform's working directory)
	env        []string // terraform's environment
	zip        []byte   // the package the example deploys
	vars       []string // -var arguments
	asgs       []string // the example's asg_names; the first is the drain's scene
	manageRBAC bool     // the module applies rbac.yaml (the example's manage_rbac)
	cluster    string
	fnName     string // the module's function_name
	providers  string // the override file's provider blocks
	// hasKubernetes: the example configures the kubernetes provider (and
	// calls modules/rbac)
	hasKubernetes bool
}

// writeOverride writes the override file: the providers, and the module's
// arguments s sets. The cluster's RBAC is the example's module
// node_drainer_rbac (its create), or, in a release's tree from before
// modules/rbac, the module's manage_rbac.
func (r *terraformRoot) writeOverride(s tfSetup) error {
	override := r.providers
	_, err := os.Stat(filepath.Join(r.work, "terraform", "modules", "rbac"))
	rbacModule := err == nil
	if s.functionName != "" || (!rbacModule && !s.manageRBAC) || s.leaseNamespace != "" || s.logLevel != "" || s.outcomeBus != "" {
		override += "\nmodule \"node_drainer\" {\n"
		if s.outcomeBus != "" {
			override += fmt.Sprintf("  outcome_event_bus         = %q\n  outcome_events_target_arn = %q\n", s.outcomeBus, s.outcomeTarget)
		}
		if s.functionName != "" {
			override += fmt.Sprintf("  function_name   = %q\n", s.functionName)
		}
		if s.leaseNamespace != "" {
			override += fmt.Sprintf("  lease_namespace = %q\n", s.leaseNamespace)
		}
		if s.logLevel != "" {
			override += fmt.Sprintf("  log_level       = %q\n", s.logLevel)
		}
		if !rbacModule {
			override += fmt.Sprintf("  manage_rbac     = %t\n", s.manageRBAC)
		}
		override += "}\n"
	}
	if rbacModule && r.hasKubernetes {
		override += fmt.Sprintf("\nmodule \"node_drainer_rbac\" {\n  create = %t\n}\n", s.manageRBAC)
	}
	return os.WriteFile(filepath.Join(r.dir, overrideFile), []byte(override), 0o644)
}

// tfSetup is what a terraform root deploys.
type tfSetup struct {
	// tree is the directory whose terraform/ (the module and its examples)
	// is copied: a release's (see upgrade_test.go); empty: the repository's.
	tree string
	// zip is the package; nil: the harness's bootstrap zipped as `make
	// package` does.
	zip  []byte
	asgs []string // the example's asg_names
	// functionName is the module's function_name; empty: the example's
	// (the module's default).
	functionName string
	// manageRBAC is the module's manage_rbac: true as in the example (the
	// harness's objects of rbac.yaml go first, so that terraform creates
	// them); false is set by the override file.
	manageRBAC bool
	// leaseNamespace is the module's lease_namespace, set by the override
	// file; empty: the module's default.
	leaseNamespace string
	// logLevel is the module's log_level, set by the override file; empty:
	// the module's default.
	logLevel string
	// outcomeBus and outcomeTarget are the module's outcome_event_bus and
	// outcome_events_target_arn, set by the override file; empty: none.
	outcomeBus, outcomeTarget string
	// example is the directory under terraform/examples applied; empty:
	// eks. Only eks has asg_names and the kubernetes provider.
	example string
	// vars are more -var arguments (name=value), for the example's own
	// variables.
	vars []string
	// override is more of the override file, after the providers.
	override string
}

func newTerraformRoot(t *testing.T, ctx context.Context, s tfSetup) *terraformRoot {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatalf("terraform is not installed (terraform 1.5+ is needed): %v", err)
	}
	// the providers from the tools cache (built once per machine)
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "tools", "providers.sh"))
	cmd.Stderr = testWriter{t}
	rcOut, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/tools/providers.sh (builds the terraform providers the first time): %v", err)
	}
	rc := strings.TrimSpace(string(rcOut))

	if s.tree == "" {
		s.tree = root
	}
	work := t.TempDir()
	if err := copyTree(filepath.Join(s.tree, "terraform"), filepath.Join(work, "terraform")); err != nil {
		t.Fatal(err)
	}
	if s.example == "" {
		s.example = "eks"
	}
	dir := filepath.Join(work, "terraform", "examples", s.example)
	r := &terraformRoot{
		t: t, work: work, dir: dir, asgs: s.asgs, manageRBAC: s.manageRBAC, cluster: harness.ClusterName,
		vars: []string{"-var", "region=" + moto.Region, "-var", "cluster_name=" + harness.ClusterName},
	}
	if s.asgs != nil {
		r.vars = append(r.vars, "-var", `asg_names=["`+strings.Join(s.asgs, `","`)+`"]`)
	}
	r.fnName = "node-drainer" // the module's default
	if s.functionName != "" {
		r.fnName = s.functionName
	}
	for _, v := range s.vars {
		r.vars = append(r.vars, "-var", v)
		if name, ok := strings.CutPrefix(v, "function_name="); ok {
			r.fnName = name
		}
	}
	if r.hasKubernetes, err = configures(dir, "kubernetes"); err != nil {
		t.Fatal(err)
	}
	zipBytes := s.zip
	if zipBytes == nil {
		if zipBytes, err = zipBootstrap(bootstrap, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.setPackage(zipBytes); err != nil {
		t.Fatal(err)
	}

	// the kubernetes provider's credential plugin: prints the admin token
	cred := filepath.Join(work, "kube-credential.json")
	credJSON, _ := json.Marshal(map[string]any{
		"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
		"status": map[string]string{"token": env.Admin.BearerToken},
	})
	if err := os.WriteFile(cred, credJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	override := fmt.Sprintf(`# Written by test/install: the example's providers pointed at the AWS
# emulator and the test harness's apiserver. Nothing else of the example
# changes but the module's arguments at the end, if there are any.
provider "aws" {
  access_key                  = %[2]q
  secret_key                  = %[3]q
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_region_validation      = true

  endpoints {
    autoscaling = %[1]q
    cloudwatch  = %[1]q
    ec2         = %[1]q
    eks         = %[1]q
    events      = %[1]q
    iam         = %[1]q
    lambda      = %[1]q
    logs        = %[1]q
    sqs         = %[1]q
    sts         = %[1]q
  }
}
`, env.AWS.URL(), moto.AccessKeyID, moto.SecretAccessKey)
	if r.hasKubernetes {
		override += fmt.Sprintf(`
provider "kubernetes" {
  exec {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "cat"
    args        = [%q]
  }
}
`, cred)
	}
	r.providers = override + s.override
	if err := r.writeOverride(s); err != nil {
		t.Fatal(err)
	}

	var tfEnv []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "TF_") || strings.HasPrefix(kv, "KUBE") {
			continue // nothing of the machine's own AWS or terraform settings
		}
		tfEnv = append(tfEnv, kv)
	}
	r.env = append(tfEnv, "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1",
		"TF_DATA_DIR="+filepath.Join(dir, ".terraform"))

	// the cluster terraform reads (data.aws_eks_cluster), answering the
	// harness's endpoint and CA; with manage_rbac the harness's own RBAC
	// objects go, so that terraform creates them (they come back when the
	// path ends)
	if err := env.CreateEKSCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if s.manageRBAC {
		deleteHarnessRBAC(t, ctx)
	}
	return r
}

// configures reports whether a configuration's *.tf files in dir have a
// provider block for name (an override file may only amend one that is
// there).
func configures(dir, name string) (bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		return false, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return false, err
		}
		if strings.Contains(string(b), "\nprovider \""+name+"\" {") {
			return true, nil
		}
	}
	return false, nil
}

// overrideFile is the file the test adds to the example (see newTerraformRoot).
const overrideFile = "emulator_override.tf"

// setPackage puts the package where examples/eks expects `make package`'s
// output (dist/node-drainer-arm64.zip beside terraform/). It holds the
// harness's bootstrap, built for this machine (the name says arm64 because
// the example's path does; the emulator runs no code).
func (r *terraformRoot) setPackage(zip []byte) error {
	if err := os.MkdirAll(filepath.Join(r.work, "dist"), 0o755); err != nil {
		return err
	}
	r.zip = zip
	return os.WriteFile(filepath.Join(r.work, "dist", "node-drainer-arm64.zip"), zip, 0o644)
}

// createASGs creates Auto Scaling groups of one instance each (no nodes):
// the example's other asg_names, which only get lifecycle hooks.
func createASGs(t *testing.T, ctx context.Context, names []string) {
	t.Helper()
	for _, a := range names {
		if _, err := env.CreateASG(ctx, harness.ASGSpec{Name: a, Size: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// run runs one terraform command in the example, its output in the test log.
func (r *terraformRoot) run(ctx context.Context, args ...string) error {
	switch args[0] {
	case "apply", "destroy", "plan":
		if args[0] == "apply" && !strings.HasPrefix(args[len(args)-1], "-") {
			break // a saved plan holds its variables
		}
		args = append(args, r.vars...)
	}
	if lambdaSvc != nil && (args[0] == "apply" || args[0] == "destroy") {
		// the module's aws_lambda_invocation runs the function on both
		forget, err := lambdaSvc.route(ctx, r.fnName)
		if err != nil {
			return fmt.Errorf("terraform %s: %w", args[0], err)
		}
		defer forget()
	}
	began := time.Now()
	cmd := exec.CommandContext(ctx, "terraform", args...)
	cmd.Dir, cmd.Env = r.dir, r.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r.t.Logf("terraform %s (%s):\n%s", args[0], time.Since(began).Round(100*time.Millisecond), tail(out.String(), 60))
	if err != nil && strings.Contains(out.String(), "unexpected smithy-protocol response header") {
		return fmt.Errorf("terraform %s: %w: the AWS emulator (moto 5.2.1) does not speak the rpc-v2-cbor protocol "+
			"that the aws provider's CloudWatch client uses (the module's aws_cloudwatch_metric_alarm): "+
			"test/harness/moto must be extended for it", args[0], err)
	}
	if err != nil {
		return fmt.Errorf("terraform %s: %w", args[0], err)
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// output reads one of the example's outputs.
func (r *terraformRoot) output(ctx context.Context, name string) (string, error) {
	b, err := r.stdout(ctx, "output", "-raw", name)
	return string(b), err
}

// stdout runs a terraform command that reads (output, show) and returns
// what it prints.
func (r *terraformRoot) stdout(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "terraform", args...)
	cmd.Dir, cmd.Env = r.dir, r.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("terraform %s: %w: %s", strings.Join(args, " "), err, tail(stderr.String(), 20))
	}
	return b, nil
}

// readBack reads what apply created through the emulator's AWS APIs and the
// cluster's API, checks it, and returns it in the paths' shared terms (see
// created) with what the drain needs.
func (r *terraformRoot) readBack(t *testing.T, ctx context.Context) (*created, deployedFunction) {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	fnARN, err := r.output(ctx, "function_arn")
	if err != nil {
		t.Fatal(err)
	}
	fnName := fnARN[strings.LastIndex(fnARN, ":")+1:]

	lc := lambda.NewFromConfig(cfg)
	f, err := lc.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(fnName)})
	if err != nil {
		t.Fatalf("GetFunction %s: %v", fnName, err)
	}
	c := f.Configuration
	sum := sha256.Sum256(r.zip)
	if got, want := aws.ToString(c.CodeSha256), base64.StdEncoding.EncodeToString(sum[:]); got != want {
		t.Errorf("the function's code is not the package: CodeSha256 %s, the zip's %s", got, want)
	}
	got := &created{Function: map[string]string{}, Hooks: map[string][]string{}}
	var archs []string
	for _, a := range c.Architectures {
		archs = append(archs, string(a))
	}
	got.Function["runtime"] = string(c.Runtime)
	got.Function["architectures"] = strings.Join(archs, ",")
	got.Function["handler"] = aws.ToString(c.Handler)
	got.Function["timeout"] = strconv.Itoa(int(aws.ToInt32(c.Timeout)))
	got.Function["memory_size"] = strconv.Itoa(int(aws.ToInt32(c.MemorySize)))
	got.Function["reserved_concurrency"] = "none"
	if f.Concurrency != nil && f.Concurrency.ReservedConcurrentExecutions != nil {
		got.Function["reserved_concurrency"] = strconv.Itoa(int(*f.Concurrency.ReservedConcurrentExecutions))
	}

	// the queue: dead letters of the rules' targets and of async invocations
	qc := sqs.NewFromConfig(cfg)
	q, err := qc.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(fnName + "-dlq")})
	if err != nil {
		t.Fatalf("the dead-letter queue %s-dlq: %v", fnName, err)
	}
	qa, err := qc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	dlqARN := qa.Attributes["QueueArn"]
	got.Function["dlq_retention_seconds"] = qa.Attributes["MessageRetentionPeriod"]
	got.Function["dlq_sse"] = qa.Attributes["SqsManagedSseEnabled"]

	// names and ARNs that differ by construction, replaced by what they are
	logGroup := "/aws/lambda/" + fnName
	lg, err := cloudwatchlogs.NewFromConfig(cfg).DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String(logGroup)})
	if err != nil || len(lg.LogGroups) != 1 {
		t.Fatalf("the log group %s: %v %+v", logGroup, err, lg)
	}
	got.Function["log_retention_days"] = strconv.Itoa(int(aws.ToInt32(lg.LogGroups[0].RetentionInDays)))
	canon := newCanon(made{
		FunctionARN: aws.ToString(c.FunctionArn), FunctionName: fnName, RoleARN: aws.ToString(c.Role),
		LogGroupARN: aws.ToString(lg.LogGroups[0].Arn), DLQARN: dlqARN, DLQURL: aws.ToString(q.QueueUrl),
		ASGs: r.asgs,
	})
	if c.Environment != nil {
		got.Env = canon.env(c.Environment.Variables)
	}

	if qa.Attributes["Policy"] == "" {
		t.Errorf("the dead-letter queue has no policy (EventBridge may not send to it)")
	} else {
		sts, _ := canon.statements(decodePolicy(t, qa.Attributes["Policy"]))
		got.QueuePolicy = statementSet(sts)
	}

	inv, err := lc.GetFunctionEventInvokeConfig(ctx, &lambda.GetFunctionEventInvokeConfigInput{FunctionName: aws.String(fnName)})
	if err != nil {
		t.Errorf("GetFunctionEventInvokeConfig: %v", err)
	} else {
		got.Function["async_retry_attempts"] = strconv.Itoa(int(aws.ToInt32(inv.MaximumRetryAttempts)))
		got.Function["async_max_event_age"] = strconv.Itoa(int(aws.ToInt32(inv.MaximumEventAgeInSeconds)))
		dest := ""
		if inv.DestinationConfig != nil && inv.DestinationConfig.OnFailure != nil {
			dest = aws.ToString(inv.DestinationConfig.OnFailure.Destination)
		}
		got.Function["dead_letter"] = canon.str(dest)
		if dest != dlqARN {
			t.Errorf("async invocations fail to %q, want the dead-letter queue %s", dest, dlqARN)
		}
	}

	// the role and its policies
	roleARN := aws.ToString(c.Role)
	roleName := roleARN[strings.LastIndex(roleARN, "/")+1:]
	ic := iam.NewFromConfig(cfg)
	role, err := ic.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(roleName)})
	if err != nil {
		t.Fatalf("GetRole %s: %v", roleName, err)
	}
	if trust := canonJSON(decodePolicy(t, aws.ToString(role.Role.AssumeRolePolicyDocument))); !strings.Contains(trust, `"lambda.amazonaws.com"`) {
		t.Errorf("the role's trust policy does not name Lambda: %s", trust)
	}
	var stmts []map[string]any
	add := func(doc string) {
		sts, nulls := canon.statements(decodePolicy(t, doc))
		if nulls > 0 {
			t.Errorf("a policy of the role has %d null statements: %s", nulls, doc)
		}
		stmts = append(stmts, sts...)
	}
	inline, err := ic.ListRolePolicies(ctx, &iam.ListRolePoliciesInput{RoleName: aws.String(roleName)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range inline.PolicyNames {
		doc, err := ic.GetRolePolicy(ctx, &iam.GetRolePolicyInput{RoleName: aws.String(roleName), PolicyName: aws.String(p)})
		if err != nil {
			t.Fatal(err)
		}
		add(aws.ToString(doc.PolicyDocument))
	}
	attached, err := ic.ListAttachedRolePolicies(ctx, &iam.ListAttachedRolePoliciesInput{RoleName: aws.String(roleName)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range attached.AttachedPolicies {
		pol, err := ic.GetPolicy(ctx, &iam.GetPolicyInput{PolicyArn: p.PolicyArn})
		if err != nil {
			t.Fatal(err)
		}
		v, err := ic.GetPolicyVersion(ctx, &iam.GetPolicyVersionInput{PolicyArn: p.PolicyArn, VersionId: pol.Policy.DefaultVersionId})
		if err != nil {
			t.Fatal(err)
		}
		add(aws.ToString(v.PolicyVersion.Document))
	}
	got.Statements = statementSet(stmts)
	if len(got.Statements) == 0 {
		t.Errorf("the role %s has no permissions", roleName)
	}

	// the rules that invoke the function, their targets and permissions
	ec := eventbridge.NewFromConfig(cfg)
	names, err := ec.ListRuleNamesByTarget(ctx, &eventbridge.ListRuleNamesByTargetInput{TargetArn: c.FunctionArn})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names.RuleNames {
		rule, err := ec.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		if p := aws.ToString(rule.EventPattern); p != "" {
			cp, err := canon.jsonDoc(p)
			if err != nil {
				t.Fatalf("rule %s: %v", name, err)
			}
			got.Patterns = append(got.Patterns, cp)
		}
		if s := aws.ToString(rule.ScheduleExpression); s != "" {
			got.Schedules = append(got.Schedules, schedule(s, string(rule.State)))
		}
		targets, err := ec.ListTargetsByRule(ctx, &eventbridge.ListTargetsByRuleInput{Rule: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range targets.Targets {
			var dl string
			var age, retries int32
			if tg.DeadLetterConfig != nil {
				dl = aws.ToString(tg.DeadLetterConfig.Arn)
			}
			if tg.RetryPolicy != nil {
				age, retries = aws.ToInt32(tg.RetryPolicy.MaximumEventAgeInSeconds), aws.ToInt32(tg.RetryPolicy.MaximumRetryAttempts)
			}
			got.Targets = append(got.Targets, canon.target(fnName, name, aws.ToString(tg.Arn), dl, age, retries))
		}
	}
	sort.Strings(got.Patterns)
	sort.Strings(got.Schedules)
	sort.Strings(got.Targets)
	if len(got.Patterns) == 0 || len(got.Schedules) == 0 {
		t.Errorf("want rules with patterns and the sweep's schedule, got %v and %v", got.Patterns, got.Schedules)
	}
	if pol, err := lc.GetPolicy(ctx, &lambda.GetPolicyInput{FunctionName: aws.String(fnName)}); err != nil {
		t.Errorf("the function's resource policy (EventBridge's permission to invoke it): %v", err)
	} else if n := strings.Count(aws.ToString(pol.Policy), "events.amazonaws.com"); n != len(names.RuleNames) {
		t.Errorf("the function lets %d rules invoke it, want %d: %s", n, len(names.RuleNames), aws.ToString(pol.Policy))
	}

	// the lifecycle hooks on the groups (the same on each)
	var rawEnv map[string]string // the drain runs with the environment as it is
	if c.Environment != nil {
		rawEnv = c.Environment.Variables
	}
	fn := deployedFunction{Name: fnName, Env: rawEnv, RoleARN: roleARN, Bootstrap: bootstrap,
		Timeout: time.Duration(aws.ToInt32(c.Timeout)) * time.Second, MemoryMB: int(aws.ToInt32(c.MemorySize))}
	for _, asg := range r.asgs {
		hooks, err := autoscaling.NewFromConfig(cfg).DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(asg)})
		if err != nil {
			t.Fatal(err)
		}
		terminate := ""
		for _, h := range hooks.LifecycleHooks {
			tr := aws.ToString(h.LifecycleTransition)
			addHook(got, tr, aws.ToString(h.DefaultResult), strconv.Itoa(int(aws.ToInt32(h.HeartbeatTimeout))), aws.ToString(h.LifecycleHookName))
			if tr == "autoscaling:EC2_INSTANCE_TERMINATING" {
				terminate = aws.ToString(h.LifecycleHookName)
			}
		}
		if terminate == "" {
			t.Errorf("no terminate lifecycle hook on %s: %+v", asg, hooks.LifecycleHooks)
		}
		if asg == r.asgs[0] {
			fn.TerminateHook = terminate
		}
	}
	if n := len(got.Hooks["autoscaling:EC2_INSTANCE_TERMINATING"]); n != 3 {
		t.Errorf("terminate hooks differ between the ASGs: %v", got.Hooks)
	}

	// the access entry of the role
	ae, err := eks.NewFromConfig(cfg).DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(r.cluster), PrincipalArn: aws.String(roleARN)})
	if err != nil {
		t.Errorf("the role's access entry: %v", err)
	} else {
		got.AccessEntryGroups = slices.Sorted(slices.Values(ae.AccessEntry.KubernetesGroups))
		if aws.ToString(ae.AccessEntry.Type) != "STANDARD" {
			t.Errorf("access entry type %s, want STANDARD", aws.ToString(ae.AccessEntry.Type))
		}
	}

	// alarms (through CloudWatch's query protocol, as the SAM path reads them)
	al, err := cloudWatchAlarmNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range al {
		if strings.HasPrefix(a, fnName+"-") {
			got.Alarms = append(got.Alarms, alarm(fnName, a))
		}
	}
	sort.Strings(got.Alarms)

	// the dashboard (create_dashboard's default), named after the function
	if got.Dashboards, err = readDashboards(ctx, fnName, fnName); err != nil {
		t.Errorf("the dashboard: %v", err)
	}

	// the cluster's objects (kubernetes_manifest of rbac.yaml), bound to the
	// access entry's group
	if r.manageRBAC {
		objs := rbacObjects(deployLeaseNamespace)
		if have := existing(t, ctx, objs); len(have) != len(objs) {
			t.Errorf("cluster objects after apply: %v, want %v", have, objectNames(objs))
		}
		if have := existing(t, ctx, deleteNodesObjects); len(have) != 0 {
			t.Errorf("cluster objects after apply with delete_terminated_nodes false: %v, want none", have)
		}
		if crb, err := env.Client.RbacV1().ClusterRoleBindings().Get(ctx, "node-drainer", metav1.GetOptions{}); err == nil {
			for _, s := range crb.Subjects {
				if s.Kind == "Group" && !slices.Contains(got.AccessEntryGroups, s.Name) {
					t.Errorf("the ClusterRoleBinding's group %s is not the access entry's %v", s.Name, got.AccessEntryGroups)
				}
			}
		}
	}

	checkCreated(t, got)
	t.Logf("created: %s", mustJSON(got))
	return got, fn
}

// assertNothingLeft fails t for each thing apply created that is still there.
func (r *terraformRoot) assertNothingLeft(t *testing.T, ctx context.Context, fn deployedFunction) {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	left := func(what string, err error) {
		if err == nil {
			t.Errorf("%s is left after destroy", what)
		} else if !notFound(err) {
			t.Errorf("%s: %v", what, err)
		}
	}
	_, err := lambda.NewFromConfig(cfg).GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(fn.Name)})
	left("the function", err)
	roleName := fn.RoleARN[strings.LastIndex(fn.RoleARN, "/")+1:]
	_, err = iam.NewFromConfig(cfg).GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(roleName)})
	left("the role", err)
	_, err = sqs.NewFromConfig(cfg).GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(fn.Name + "-dlq")})
	left("the dead-letter queue", err)
	_, err = eks.NewFromConfig(cfg).DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(r.cluster), PrincipalArn: aws.String(fn.RoleARN)})
	left("the access entry", err)
	if rules, err := eventbridge.NewFromConfig(cfg).ListRules(ctx, &eventbridge.ListRulesInput{NamePrefix: aws.String(fn.Name + "-")}); err != nil || len(rules.Rules) != 0 {
		t.Errorf("rules left after destroy: %v %+v", err, rules)
	}
	for _, asg := range r.asgs {
		if hooks := hookNames(t, ctx, asg); len(slices.DeleteFunc(hooks, func(h string) bool { return h == otherToolHook })) != 0 {
			t.Errorf("lifecycle hooks left on %s after destroy: %v", asg, hooks)
		}
	}
	if lg, err := cloudwatchlogs.NewFromConfig(cfg).DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String("/aws/lambda/" + fn.Name)}); err != nil || len(lg.LogGroups) != 0 {
		t.Errorf("log groups left after destroy: %v %+v", err, lg)
	}
	if al, err := cloudWatchAlarmNames(ctx); err != nil {
		t.Errorf("alarms: %v", err)
	} else {
		for _, a := range al {
			if strings.HasPrefix(a, fn.Name+"-") {
				t.Errorf("alarm %s left after destroy", a)
			}
		}
	}
	if d, err := readDashboards(ctx, fn.Name, fn.Name); err == nil {
		t.Errorf("the dashboard is left after destroy: %v", d)
	} else if !strings.Contains(err.Error(), "ResourceNotFound") && !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("the dashboard: %v", err)
	}
	if !r.manageRBAC {
		return
	}
	if err := waitGone(ctx, rbacObjects(deployLeaseNamespace)); err != nil {
		t.Errorf("cluster objects left after destroy: %v", existing(t, ctx, rbacObjects(deployLeaseNamespace)))
	}
}

func notFound(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "ResourceNotFoundException", "NoSuchEntity", "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist":
		return true
	}
	return false
}

// zipBootstrap zips a bootstrap as `make package` does (one entry,
// bootstrap, mode 0755), with comment as the archive's comment (`make
// package` sets none).
func zipBootstrap(path, comment string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading bootstrap: %w", err)
	}
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate}
	h.SetMode(0o755)
	w, err := z.CreateHeader(h)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := z.SetComment(comment); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// copyTree copies a directory, leaving out terraform's working files.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		base := d.Name()
		if d.IsDir() && base == ".terraform" || strings.HasPrefix(base, "terraform.tfstate") || base == ".terraform.lock.hcl" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
