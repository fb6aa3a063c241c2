package install

// SAM's path of `make deploy-test`: what `sam build && sam deploy` does, with
// the emulator's CloudFormation in place of AWS's.
//
//	sam_transform  `make build-NodeDrainerFunction ARTIFACTS_DIR=...` (sam
//	               build's Makefile method), the artifact zipped and uploaded
//	               to the emulator's S3 (sam deploy's packaging), then
//	               hack/sam/transform.py: SAM's translator, as
//	               CloudFormation runs the template's transform;
//	sam_deploy     CreateStack of the plain template; its Custom::LifecycleHooks
//	               served by the real bootstrap (samhooks_test.go), whose
//	               answer completes the stack: CREATE_COMPLETE, then
//	               everything read back through the service APIs; each
//	               resource type the emulator skipped (in the template,
//	               absent from its service) is asserted on the template,
//	               resolved for this stack, and named in partial:<types>;
//	sam_drain      the landed bootstrap under the runtime emulator with the
//	               created function's environment (plus only the harness's
//	               endpoints and the role's credentials) drains a node;
//	sam_delete     (not reported) the custom resource's Delete removes
//	               node-drainer's hooks (listed and tagged groups, not
//	               another tool's), then DeleteStack leaves nothing behind.

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithymiddleware "github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/deploy"
	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/authwebhook"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

func init() { paths["sam"] = runSAM }

const (
	samStackName = "node-drainer"
	samBucket    = "node-drainer-sam-artifacts"
)

// samASGs are the stack's AsgNames (one ARN each in the listed groups'
// policy, their hooks put by the function). The first is drained.
var samASGs = []string{"sam-nodes-a", "sam-nodes-b"}

// samRun carries one run of the SAM path from step to step.
type samRun struct {
	dir     string
	params  map[string]string
	zipSHA  string         // base64 SHA-256 of the uploaded zip, as Lambda reports CodeSha256
	tmpl    map[string]any // the transformed template
	stackID string
	eval    *cfnEval
	insts   map[string][]harness.Instance
	fnName  string
	roleARN string
	skipped []string // resource types the emulator's CloudFormation skipped
	dropped []string // properties it dropped from resources it created
	mapped  string   // principal mapped in the token webhook
}

func runSAM(t *testing.T) *created {
	r := &samRun{dir: t.TempDir(), insts: map[string][]harness.Instance{}}
	r.params = map[string]string{
		"AsgNames":       strings.Join(samASGs, ","),
		"ClusterName":    harness.ClusterName,
		"LeaseNamespace": deployLeaseNamespace,
	}
	// the lease namespace's RBAC as rbac-lease-namespace.yaml tells SAM's
	// users (kubectl create namespace; kubectl apply -n): the stack does not
	// hold the cluster's objects
	if err := env.ApplyLeaseNamespaceRBAC(samCtx(t, time.Minute), deployLeaseNamespace); err != nil {
		t.Errorf("applying the lease namespace's RBAC for the SAM path: %v", err)
		return nil
	}
	if !step(t, "sam_transform", r.transform) {
		return nil
	}
	var c *created
	deployed := step(t, "sam_deploy", func(t *testing.T) string {
		c = r.deploy(t)
		var partial []string
		partial = append(partial, r.skipped...)
		partial = append(partial, r.dropped...)
		if len(partial) > 0 {
			return "partial:" + strings.Join(partial, ",")
		}
		return ""
	})
	drained := deployed && step(t, "sam_drain", r.drain)
	if drained {
		step(t, "tag_discovery_sam", r.tagDiscovery)
		t.Run("sam_updates", r.updates)
	}
	switch {
	case drained:
		step(t, "uninstall_clean_sam", func(t *testing.T) string {
			ctx := samCtx(t, 10*time.Minute)
			fn := r.deployed(t, ctx)
			sc := prepareUninstall(t, t, ctx, "sam", fn, samASGs)
			r.delete(t, sc, &fn)
			checkUninstallClean(t, ctx, sc)
			return ""
		})
	case r.stackID != "":
		t.Run("sam_delete", func(t *testing.T) { r.delete(t, nil, nil) })
	}
	if !deployed {
		return nil
	}
	return c
}

func samCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// transform is sam build, sam deploy's packaging and the two transforms.
func (r *samRun) transform(t *testing.T) string {
	ctx := samCtx(t, 10*time.Minute)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// sam build: the template's Metadata BuildMethod makefile.
	art := filepath.Join(r.dir, "artifacts")
	began := time.Now()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "build-NodeDrainerFunction", "ARTIFACTS_DIR="+art)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sam build (make build-NodeDrainerFunction): %v\n%s", err, out)
	}
	t.Logf("sam build: make build-NodeDrainerFunction in %s", time.Since(began).Round(100*time.Millisecond))
	bin, err := os.ReadFile(filepath.Join(art, "bootstrap"))
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("the built bootstrap is not an ELF binary: %v", err)
	}
	if ef.Machine != elf.EM_AARCH64 {
		t.Errorf("the built bootstrap is for %v, the template says arm64", ef.Machine)
	}
	// sam deploy's packaging: zip, upload, CodeUri pointed at it.
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err == nil {
		_, err = w.Write(bin)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(zbuf.Bytes())
	r.zipSHA = base64.StdEncoding.EncodeToString(sum[:])
	key := "node-drainer/" + hex.EncodeToString(sum[:16]) + ".zip"
	s3c := s3.NewFromConfig(env.AWS.AWSConfig(), func(o *s3.Options) { o.UsePathStyle = true })
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(samBucket)}); err != nil {
		t.Fatalf("creating the artifact bucket: %v", err)
	}
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(samBucket), Key: aws.String(key), Body: bytes.NewReader(zbuf.Bytes())}); err != nil {
		t.Fatalf("uploading the artifact: %v", err)
	}
	t.Logf("sam package: %d-byte zip uploaded to s3://%s/%s", zbuf.Len(), samBucket, key)

	args := []string{filepath.Join(root, "hack", "sam", "transform.py"), "--template", filepath.Join(root, "template.yaml"),
		"--code-uri", "s3://" + samBucket + "/" + key, "--region", moto.Region}
	for _, k := range slices.Sorted(maps.Keys(r.params)) {
		args = append(args, "--parameter", k+"="+r.params[k])
	}
	began = time.Now()
	cmd = exec.CommandContext(ctx, "python3", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/sam/transform.py: %v\n%s", err, stderr.Bytes())
	}
	t.Logf("transform (language extensions + SAM translator) in %s", time.Since(began).Round(100*time.Millisecond))
	if err := os.WriteFile(filepath.Join(r.dir, "transformed.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber() // numbers keep their text (2000000000, not 2e+09)
	if err := dec.Decode(&r.tmpl); err != nil {
		t.Fatalf("the transformed template is not JSON: %v", err)
	}
	if tr, ok := r.tmpl["Transform"]; ok {
		t.Errorf("the transformed template still has Transform %v", tr)
	}
	counts := map[string]int{}
	for id, v := range r.resources() {
		ty, _ := v["Type"].(string)
		if strings.HasPrefix(ty, "AWS::Serverless::") {
			t.Errorf("%s is still %s", id, ty)
		}
		counts[ty]++
	}
	// the rules: the event rules, the sweep's and the outcome events' route
	// (created only when asked: OutcomeEventBus and OutcomeEventsTargetArn)
	want := map[string]int{
		"AWS::Lambda::Function": 1, "AWS::IAM::Role": 1, "AWS::Events::Rule": 10, "AWS::Lambda::Permission": 9,
		"AWS::Lambda::EventInvokeConfig": 1, "AWS::SQS::Queue": 1, "AWS::SQS::QueuePolicy": 1, "AWS::Logs::LogGroup": 1,
		"AWS::CloudWatch::Alarm": 5, "AWS::CloudWatch::Dashboard": 1, "AWS::IAM::Policy": 4, "Custom::LifecycleHooks": 1, "Custom::LifecycleHooksRelease": 1, "AWS::EKS::AccessEntry": 1,
	}
	if !mapsEqual(counts, want) {
		t.Errorf("resource types of the transformed template:\ngot  %v\nwant %v", counts, want)
	}
	// one custom resource for every listed group's hooks: no resource per group
	if groups := r.props("LifecycleHooks")["AsgNames"]; groups == nil {
		t.Errorf("the hooks' custom resource names no groups: %v", r.props("LifecycleHooks"))
	}
	code := r.props("NodeDrainerFunction")["Code"]
	if want := map[string]any{"S3Bucket": samBucket, "S3Key": key}; !jsonEqual(code, want) {
		t.Errorf("the function's Code is %v, want the uploaded artifact %v", code, want)
	}
	return ""
}

func (r *samRun) resources() map[string]map[string]any {
	out := map[string]map[string]any{}
	res, _ := r.tmpl["Resources"].(map[string]any)
	for id, v := range res {
		m, _ := v.(map[string]any)
		out[id] = m
	}
	return out
}

func (r *samRun) props(id string) map[string]any {
	p, _ := r.resources()[id]["Properties"].(map[string]any)
	return p
}

// ofType lists the logical IDs of the template's resources of a type that
// this stack creates (their Condition holds), sorted.
func (r *samRun) ofType(t *testing.T, ty string) []string {
	t.Helper()
	var ids []string
	for id, v := range r.resources() {
		if v["Type"] != ty {
			continue
		}
		on, err := r.eval.active(v)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if on {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// resolved is a resource's properties resolved for this stack.
func (r *samRun) resolved(t *testing.T, id string) map[string]any {
	t.Helper()
	v, err := r.eval.resolve(r.props(id))
	if err != nil {
		t.Fatalf("resolving %s: %v", id, err)
	}
	m, _ := v.(map[string]any)
	return m
}

func (r *samRun) skip(t *testing.T, ty, why string) {
	t.Helper()
	if !slices.Contains(r.skipped, ty) {
		r.skipped = append(r.skipped, ty)
		t.Logf("SKIPPED BY THE EMULATOR: %s (%s); asserting on the transformed template instead", ty, why)
	}
}

// deploy creates the stack and reads back what exists.
func (r *samRun) deploy(t *testing.T) *created {
	ctx := samCtx(t, 5*time.Minute)
	cfg := env.AWS.AWSConfig()
	// what the user has before deploying: the cluster (in EKS) and the ASGs
	var inUse *ekstypes.ResourceInUseException
	if _, err := eks.NewFromConfig(cfg).CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(harness.ClusterName), RoleArn: aws.String("arn:aws:iam::" + moto.AccountID + ":role/eks-cluster"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-1"}},
		AccessConfig:       &ekstypes.CreateAccessConfigRequest{AuthenticationMode: ekstypes.AuthenticationModeApi},
	}); err != nil && !errors.As(err, &inUse) {
		t.Fatalf("creating the EKS cluster: %v", err)
	}
	for i, a := range samASGs {
		insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: a, Size: 2 - i})
		if err != nil {
			t.Fatal(err)
		}
		r.insts[a] = insts
	}

	cf := cloudformation.NewFromConfig(cfg)
	body, err := json.Marshal(r.tmpl)
	if err != nil {
		t.Fatal(err)
	}
	var params []cftypes.Parameter
	for _, k := range slices.Sorted(maps.Keys(r.params)) {
		params = append(params, cftypes.Parameter{ParameterKey: aws.String(k), ParameterValue: aws.String(r.params[k])})
	}
	began := time.Now()
	out, err := cf.CreateStack(ctx, &cloudformation.CreateStackInput{
		StackName: aws.String(samStackName), TemplateBody: aws.String(string(body)), Parameters: params,
		Capabilities: []cftypes.Capability{cftypes.CapabilityCapabilityIam, cftypes.CapabilityCapabilityNamedIam, cftypes.CapabilityCapabilityAutoExpand},
	})
	if err != nil {
		t.Fatalf("CreateStack: %v", err)
	}
	r.stackID = *out.StackId
	// the hooks' custom resources: the stack waits for their answers (the
	// release step's Create does nothing)
	r.customRequest(t, ctx, "LifecycleHooksRelease", "Create", nil, r.cfnResponseURL())
	r.hookRequest(t, ctx, "Create", nil, r.cfnResponseURL())
	status, reason := r.waitStack(t, ctx, "CREATE_IN_PROGRESS")
	if status != cftypes.StackStatusCreateComplete {
		t.Fatalf("stack %s: %s", status, reason)
	}
	t.Logf("CreateStack: CREATE_COMPLETE in %s", time.Since(began).Round(100*time.Millisecond))
	rs, err := cf.DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: aws.String(r.stackID)})
	if err != nil {
		t.Fatal(err)
	}
	r.eval = newCfnEval(r.tmpl, r.params, moto.Region, moto.AccountID, samStackName)
	for _, res := range rs.StackResources {
		if res.LogicalResourceId != nil && res.PhysicalResourceId != nil {
			r.eval.refs[*res.LogicalResourceId] = *res.PhysicalResourceId
		}
	}
	c := &created{Function: map[string]string{}, Hooks: map[string][]string{}}
	cn := r.canon(t, ctx)
	r.readFunction(t, ctx, c, cn)
	r.readRole(t, ctx, c, cn)
	r.readRules(t, ctx, c, cn)
	r.readQueue(t, ctx, c, cn)
	r.readLogsAndAlarms(t, ctx, c)
	r.readHooks(t, ctx, c)
	r.readAccessEntry(t, ctx, c)
	sort.Strings(r.skipped)
	c.FromTemplate = append(slices.Clone(r.skipped), r.dropped...)
	sort.Strings(c.FromTemplate)
	checkCreated(t, c)
	t.Logf("created (canonical terms): %s", mustJSON(c))
	if len(r.skipped) > 0 {
		t.Logf("the emulator's CloudFormation skipped %s: checked on the transformed template", strings.Join(r.skipped, ", "))
	}
	if len(r.dropped) > 0 {
		t.Logf("the emulator dropped %s: checked on the transformed template", strings.Join(r.dropped, ", "))
	}
	return c
}

func (r *samRun) waitStack(t *testing.T, ctx context.Context, inProgress string) (cftypes.StackStatus, string) {
	t.Helper()
	cf := cloudformation.NewFromConfig(env.AWS.AWSConfig())
	for {
		out, err := cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(r.stackID)})
		if err != nil {
			t.Fatalf("DescribeStacks: %v", err)
		}
		s := out.Stacks[0]
		if string(s.StackStatus) != inProgress {
			return s.StackStatus, aws.ToString(s.StackStatusReason)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stack still %s: %v", inProgress, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// canon turns the names and ARNs the stack made into the placeholders for
// what they stand for (canon_test.go). The function's, queue's and log
// group's names are the template's (from FunctionName) and stay, but for
// the rules' prefix in ARN patterns.
func (r *samRun) canon(t *testing.T, ctx context.Context) canon {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	fn := r.eval.refs["NodeDrainerFunction"]
	if fn == "" {
		t.Fatal("the stack has no NodeDrainerFunction")
	}
	r.fnName = fn
	f, err := lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) }).GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(fn)})
	if err != nil {
		t.Fatalf("GetFunction %s: %v", fn, err)
	}
	r.roleARN = aws.ToString(f.Configuration.Role)
	q, err := sqs.NewFromConfig(cfg).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(r.eval.refs["DeadLetterQueue"]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("the dead-letter queue: %v", err)
	}
	lg, err := cloudwatchlogs.NewFromConfig(cfg).DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String(r.eval.refs["LogGroup"])})
	if err != nil || len(lg.LogGroups) != 1 {
		t.Fatalf("the log group %s: %v %v", r.eval.refs["LogGroup"], err, lg)
	}
	// what Fn::GetAtt answers for this stack, read from the services
	r.eval.attrs["NodeDrainerFunction.Arn"] = aws.ToString(f.Configuration.FunctionArn)
	r.eval.attrs["FunctionRole.Arn"] = r.roleARN
	r.eval.attrs["DeadLetterQueue.Arn"] = q.Attributes["QueueArn"]
	r.eval.attrs["DeadLetterQueue.QueueName"] = r.eval.refs["DeadLetterQueue"][strings.LastIndex(r.eval.refs["DeadLetterQueue"], "/")+1:]
	r.eval.attrs["LogGroup.Arn"] = aws.ToString(lg.LogGroups[0].Arn)
	// DescribeLogGroups' Arn ends in :* (as CloudFormation's GetAtt Arn
	// does); newCanon replaces it with and without
	return newCanon(made{
		FunctionARN: aws.ToString(f.Configuration.FunctionArn), FunctionName: fn, RoleARN: r.roleARN,
		LogGroupARN: aws.ToString(lg.LogGroups[0].Arn),
		DLQARN:      q.Attributes["QueueArn"], DLQURL: r.eval.refs["DeadLetterQueue"],
		ASGs: samASGs,
	})
}

// readFunction fills created.Function with the keys runtime, handler,
// timeout, memory_size, architectures (comma-separated), reserved_concurrency
// ("none" when unreserved), dead_letter (where failed asynchronous
// invocations go: <dead-letter-queue>), async_retry_attempts and
// async_max_event_age (the EventInvokeConfig), and created.Env with the
// environment.
func (r *samRun) readFunction(t *testing.T, ctx context.Context, c *created, cn canon) {
	t.Helper()
	lc := lambda.NewFromConfig(env.AWS.AWSConfig(), func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) })
	f, err := lc.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(r.fnName)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.Configuration
	want := r.resolved(t, "NodeDrainerFunction")
	numericEnv.Range(func(k, _ any) bool {
		t.Logf("EMULATOR QUIRK: GetFunction answered %s as a JSON number (CloudFormation passes a Number parameter on as a string); read as its string", k)
		return true
	})
	if got := aws.ToString(cfg.CodeSha256); got != r.zipSHA {
		t.Errorf("the function's code is %s, not the uploaded artifact %s", got, r.zipSHA)
	}
	c.Function["runtime"] = string(cfg.Runtime)
	c.Function["handler"] = aws.ToString(cfg.Handler)
	c.Function["timeout"] = fmt.Sprint(aws.ToInt32(cfg.Timeout))
	c.Function["memory_size"] = fmt.Sprint(aws.ToInt32(cfg.MemorySize))
	for k, v := range map[string]string{"runtime": "Runtime", "handler": "Handler", "timeout": "Timeout", "memory_size": "MemorySize"} {
		if fmt.Sprint(want[v]) != c.Function[k] {
			t.Errorf("function %s is %s, the template says %v", k, c.Function[k], want[v])
		}
	}
	var arch []string
	for _, a := range cfg.Architectures {
		arch = append(arch, string(a))
	}
	var wantArch []string
	for _, a := range want["Architectures"].([]any) {
		wantArch = append(wantArch, fmt.Sprint(a))
	}
	if !slices.Equal(arch, wantArch) {
		r.dropped = append(r.dropped, "AWS::Lambda::Function.Architectures")
		t.Logf("DROPPED BY THE EMULATOR: the function's Architectures are %v, the template says %v; the template's value is used", arch, wantArch)
		arch = wantArch
	}
	c.Function["architectures"] = strings.Join(arch, ",")
	if lcfg, ok := want["LoggingConfig"]; ok && cfg.LoggingConfig == nil {
		r.dropped = append(r.dropped, "AWS::Lambda::Function.LoggingConfig")
		t.Logf("DROPPED BY THE EMULATOR: the function has no LoggingConfig; the template's is %v", lcfg)
	}
	conc, err := lc.GetFunctionConcurrency(ctx, &lambda.GetFunctionConcurrencyInput{FunctionName: aws.String(r.fnName)})
	if err != nil {
		t.Fatalf("GetFunctionConcurrency: %v", err)
	}
	c.Function["reserved_concurrency"] = "none"
	if conc.ReservedConcurrentExecutions != nil {
		c.Function["reserved_concurrency"] = fmt.Sprint(*conc.ReservedConcurrentExecutions)
	}
	if _, set := want["ReservedConcurrentExecutions"]; set != (conc.ReservedConcurrentExecutions != nil) {
		t.Errorf("reserved concurrency %s, the template sets %v", c.Function["reserved_concurrency"], want["ReservedConcurrentExecutions"])
	}
	if cfg.Environment == nil {
		t.Fatal("the function has no environment")
	}
	c.Env = cn.env(cfg.Environment.Variables)
	wantEnv, _ := want["Environment"].(map[string]any)["Variables"].(map[string]any)
	for k, v := range wantEnv {
		if got, ok := cfg.Environment.Variables[k]; !ok || got != fmt.Sprint(v) {
			t.Errorf("environment %s=%q, the template says %q", k, got, v)
		}
	}
	if len(cfg.Environment.Variables) != len(wantEnv) {
		t.Errorf("the function has %d environment variables, the template %d", len(cfg.Environment.Variables), len(wantEnv))
	}

	// asynchronous invocations: retries, age, the failure destination
	var retries, age, dest string
	eic, err := lc.GetFunctionEventInvokeConfig(ctx, &lambda.GetFunctionEventInvokeConfigInput{FunctionName: aws.String(r.fnName)})
	var nf *lambdatypes.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		r.skip(t, "AWS::Lambda::EventInvokeConfig", "GetFunctionEventInvokeConfig: "+err.Error())
		ids := r.ofType(t, "AWS::Lambda::EventInvokeConfig")
		if len(ids) != 1 {
			t.Fatalf("want one EventInvokeConfig in the template, got %v", ids)
		}
		p := r.resolved(t, ids[0])
		if p["FunctionName"] != r.fnName || p["Qualifier"] != "$LATEST" {
			t.Errorf("the template's EventInvokeConfig is for %v:%v, not the function", p["FunctionName"], p["Qualifier"])
		}
		retries, age = fmt.Sprint(p["MaximumRetryAttempts"]), fmt.Sprint(p["MaximumEventAgeInSeconds"])
		d, _ := p["DestinationConfig"].(map[string]any)
		of, _ := d["OnFailure"].(map[string]any)
		dest = fmt.Sprint(of["Destination"])
	case err != nil:
		t.Fatalf("GetFunctionEventInvokeConfig: %v", err)
	default:
		retries, age = fmt.Sprint(aws.ToInt32(eic.MaximumRetryAttempts)), fmt.Sprint(aws.ToInt32(eic.MaximumEventAgeInSeconds))
		if eic.DestinationConfig != nil && eic.DestinationConfig.OnFailure != nil {
			dest = aws.ToString(eic.DestinationConfig.OnFailure.Destination)
		}
	}
	c.Function["async_retry_attempts"] = retries
	c.Function["async_max_event_age"] = age
	c.Function["dead_letter"] = cn.str(dest)
	if c.Function["dead_letter"] != phDLQ {
		t.Errorf("asynchronous failures go to %q, not the dead-letter queue", dest)
	}
}

func (r *samRun) readRole(t *testing.T, ctx context.Context, c *created, cn canon) {
	t.Helper()
	ic := iam.NewFromConfig(env.AWS.AWSConfig())
	roleName := r.roleARN[strings.LastIndex(r.roleARN, "/")+1:]
	if roleName != r.eval.refs["FunctionRole"] {
		t.Errorf("the function runs as %s, not the stack's FunctionRole %s", r.roleARN, r.eval.refs["FunctionRole"])
	}
	role, err := ic.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(roleName)})
	if err != nil {
		t.Fatalf("GetRole: %v", err)
	}
	trust := decodePolicy(t, aws.ToString(role.Role.AssumeRolePolicyDocument))
	if !strings.Contains(canonJSON(trust), `"lambda.amazonaws.com"`) {
		t.Errorf("the role does not trust Lambda: %s", canonJSON(trust))
	}
	var stmts []map[string]any
	add := func(doc any) {
		sts, nulls := cn.statements(doc)
		if nulls > 0 {
			// the emulator's CloudFormation keeps a statement that
			// resolved to AWS::NoValue as null; CloudFormation drops it
			t.Logf("EMULATOR QUIRK: %d policy statements that are AWS::NoValue were kept as null; left out, as CloudFormation leaves them out", nulls)
		}
		stmts = append(stmts, sts...)
	}
	// the role's own inline policies (AWS::IAM::Role Policies)
	inline, err := ic.ListRolePolicies(ctx, &iam.ListRolePoliciesInput{RoleName: aws.String(roleName)})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, name := range inline.PolicyNames {
		p, err := ic.GetRolePolicy(ctx, &iam.GetRolePolicyInput{RoleName: aws.String(roleName), PolicyName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		have[name] = true
		add(decodePolicy(t, aws.ToString(p.PolicyDocument)))
	}
	rp := r.resolved(t, "FunctionRole")
	tmpl := map[string]map[string]any{} // the template's inline statements by Sid
	for _, p := range listOf(rp["Policies"]) {
		name := fmt.Sprint(p.(map[string]any)["PolicyName"])
		if !have[name] {
			t.Errorf("the role has no inline policy %s", name)
		}
		sts, _ := cn.statements(p.(map[string]any)["PolicyDocument"])
		for _, st := range sts {
			if sid, ok := st["Sid"].(string); ok {
				tmpl[sid] = st
			}
		}
	}
	// The emulator's CloudFormation answers Fn::GetAtt LogGroup.Arn without
	// the ":*" CloudFormation's ends in (the log group's streams): a read-back
	// statement that differs from the template's (resolved with
	// CloudFormation's value) only so is the template's.
	for i, st := range stmts {
		sid, _ := st["Sid"].(string)
		want, ok := tmpl[sid]
		if !ok || canonJSON(st) == canonJSON(want) {
			continue
		}
		if strings.ReplaceAll(canonJSON(st), `"`+phLogGroup+`"`, `"`+phLogGroup+`:*"`) == canonJSON(want) {
			t.Logf("EMULATOR QUIRK: the role's statement %s names %s, the template's (Fn::GetAtt LogGroup.Arn as CloudFormation answers it) %s:*; the template's is used", sid, phLogGroup, phLogGroup)
			stmts[i] = want
			if !slices.Contains(r.dropped, "AWS::Logs::LogGroup.Arn") {
				r.dropped = append(r.dropped, "AWS::Logs::LogGroup.Arn")
			}
			continue
		}
		t.Logf("the role's statement %s is %s, the template's %s", sid, canonJSON(st), canonJSON(want))
	}
	// AWS::IAM::RolePolicy resources (one per ASG; the group tag's, whose
	// document is a JSON string)
	for _, id := range r.ofType(t, "AWS::IAM::RolePolicy") {
		p := r.resolved(t, id)
		if p["RoleName"] != roleName {
			t.Errorf("%s is for role %v, not %s", id, p["RoleName"], roleName)
		}
		name := fmt.Sprint(p["PolicyName"])
		if have[name] {
			continue // created, read above
		}
		r.skip(t, "AWS::IAM::RolePolicy", "role "+roleName+" has no policy "+name)
		if doc, isString := p["PolicyDocument"].(string); isString {
			add(decodePolicy(t, doc))
		} else {
			add(p["PolicyDocument"])
		}
	}
	// managed policies
	att, err := ic.ListAttachedRolePolicies(ctx, &iam.ListAttachedRolePoliciesInput{RoleName: aws.String(roleName)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(listOf(rp["ManagedPolicyArns"])); n != len(att.AttachedPolicies) {
		t.Errorf("the role has %d managed policies, the template %d", len(att.AttachedPolicies), n)
	}
	for _, a := range att.AttachedPolicies {
		pol, err := ic.GetPolicy(ctx, &iam.GetPolicyInput{PolicyArn: a.PolicyArn})
		if err != nil {
			t.Fatal(err)
		}
		v, err := ic.GetPolicyVersion(ctx, &iam.GetPolicyVersionInput{PolicyArn: a.PolicyArn, VersionId: pol.Policy.DefaultVersionId})
		if err != nil {
			t.Fatal(err)
		}
		add(decodePolicy(t, aws.ToString(v.PolicyVersion.Document)))
	}
	c.Statements = statementSet(samAsTerraform(t, stmts))
}

// samAsTerraform states the two differences between the templates' grants
// that are on purpose, so that deploy_paths_equal compares the rest: SAM's
// listed-group ARNs have wildcards for partition, region and account (its
// ARN list is the names joined with a literal, which cannot hold
// ${AWS::Region}), where terraform's name them; and SAM's function puts and
// removes the listed groups' hooks (deploy.OnlyInSAMStatements), which
// terraform creates as resources.
func samAsTerraform(t *testing.T, stmts []map[string]any) []map[string]any {
	t.Helper()
	const wild, named = "arn:*:autoscaling:*:*:autoScalingGroup:", "arn:aws:autoscaling:" + moto.Region + ":" + moto.AccountID + ":autoScalingGroup:"
	var out []map[string]any
	for _, st := range stmts {
		sid, _ := st["Sid"].(string)
		if deploy.OnlyInSAMStatements[sid] {
			t.Logf("SAM ONLY, ON PURPOSE: statement %s %s (terraform creates the listed groups' hooks itself)", sid, canonJSON(st))
			continue
		}
		if res, ok := st["Resource"].([]string); ok && slices.ContainsFunc(res, func(r string) bool { return strings.HasPrefix(r, wild) }) {
			asNamed := make([]string, len(res))
			for i, r := range res {
				asNamed[i] = strings.Replace(r, wild, named, 1)
			}
			t.Logf("SAM'S WILDCARDS, ON PURPOSE: statement %s names %v as %s…", sid, res, wild)
			st = maps.Clone(st)
			st["Resource"] = asNamed
		}
		out = append(out, st)
	}
	return out
}

func (r *samRun) readRules(t *testing.T, ctx context.Context, c *created, cn canon) {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	eb := eventbridge.NewFromConfig(cfg)
	fnARN := r.eval.attrs["NodeDrainerFunction.Arn"]
	pol, err := lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) }).GetPolicy(ctx, &lambda.GetPolicyInput{FunctionName: aws.String(r.fnName)})
	if err != nil {
		t.Fatalf("the function's resource policy: %v", err)
	}
	resPolicy := aws.ToString(pol.Policy)
	for _, id := range r.ofType(t, "AWS::Events::Rule") {
		want := r.resolved(t, id)
		name := r.eval.refs[id]
		rule, err := eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(name)})
		if err != nil {
			t.Fatalf("rule %s (%s): %v", id, name, err)
		}
		if s := fmt.Sprint(want["State"]); want["State"] != nil && string(rule.State) != s {
			t.Errorf("rule %s is %s, the template says %s", name, rule.State, s)
		}
		if p := aws.ToString(rule.EventPattern); p != "" {
			var v any
			if err := json.Unmarshal([]byte(p), &v); err != nil {
				t.Fatalf("rule %s pattern: %v", name, err)
			}
			if !jsonEqual(v, want["EventPattern"]) {
				t.Errorf("rule %s pattern %s, the template says %s", name, canonJSON(v), canonJSON(want["EventPattern"]))
			}
			cp, err := cn.jsonDoc(p)
			if err != nil {
				t.Fatalf("rule %s: %v", name, err)
			}
			c.Patterns = append(c.Patterns, cp)
		}
		if s := aws.ToString(rule.ScheduleExpression); s != "" {
			if s != want["ScheduleExpression"] {
				t.Errorf("rule %s schedule %s, the template says %v", name, s, want["ScheduleExpression"])
			}
			c.Schedules = append(c.Schedules, schedule(s, string(rule.State)))
		}
		tg, err := eb.ListTargetsByRule(ctx, &eventbridge.ListTargetsByRuleInput{Rule: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		if len(tg.Targets) != 1 || aws.ToString(tg.Targets[0].Arn) != fnARN {
			t.Errorf("rule %s targets %+v, want the function only", name, tg.Targets)
			continue
		}
		tgt := tg.Targets[0]
		var dl string
		var age, retries int32
		if tgt.DeadLetterConfig != nil {
			dl = aws.ToString(tgt.DeadLetterConfig.Arn)
		}
		if tgt.RetryPolicy != nil {
			age, retries = aws.ToInt32(tgt.RetryPolicy.MaximumEventAgeInSeconds), aws.ToInt32(tgt.RetryPolicy.MaximumRetryAttempts)
		}
		c.Targets = append(c.Targets, cn.target(r.fnName, name, aws.ToString(tgt.Arn), dl, age, retries))
		if dl != r.eval.attrs["DeadLetterQueue.Arn"] {
			t.Errorf("rule %s target has no dead-letter queue", name)
		}
		wt := listOf(want["Targets"])[0].(map[string]any)["RetryPolicy"].(map[string]any)
		if tgt.RetryPolicy == nil || fmt.Sprint(aws.ToInt32(tgt.RetryPolicy.MaximumRetryAttempts)) != wt["MaximumRetryAttempts"] ||
			fmt.Sprint(aws.ToInt32(tgt.RetryPolicy.MaximumEventAgeInSeconds)) != wt["MaximumEventAgeInSeconds"] {
			t.Errorf("rule %s target retry policy %+v, the template says %v", name, tgt.RetryPolicy, wt)
		}
		ruleARN := fmt.Sprintf("arn:aws:events:%s:%s:rule/%s", moto.Region, moto.AccountID, name)
		if !strings.Contains(resPolicy, `"`+ruleARN+`"`) {
			t.Errorf("the function does not let rule %s invoke it", name)
		}
	}
	sort.Strings(c.Patterns)
	sort.Strings(c.Schedules)
	sort.Strings(c.Targets)
}

func (r *samRun) readQueue(t *testing.T, ctx context.Context, c *created, cn canon) {
	t.Helper()
	q, err := sqs.NewFromConfig(env.AWS.AWSConfig()).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(r.eval.refs["DeadLetterQueue"]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := r.resolved(t, "DeadLetterQueue")
	c.Function["dlq_retention_seconds"] = q.Attributes["MessageRetentionPeriod"]
	c.Function["dlq_sse"] = q.Attributes["SqsManagedSseEnabled"]
	if q.Attributes["MessageRetentionPeriod"] != want["MessageRetentionPeriod"] || q.Attributes["SqsManagedSseEnabled"] != fmt.Sprint(want["SqsManagedSseEnabled"]) {
		t.Errorf("queue retention %s SSE %s, the template says %v", q.Attributes["MessageRetentionPeriod"], q.Attributes["SqsManagedSseEnabled"], want)
	}
	for _, id := range r.ofType(t, "AWS::SQS::QueuePolicy") {
		p := r.resolved(t, id)
		doc := p["PolicyDocument"]
		if got := q.Attributes["Policy"]; got != "" {
			doc = decodePolicy(t, got)
		} else {
			r.skip(t, "AWS::SQS::QueuePolicy", "the queue has no Policy attribute")
			if qs := listOf(p["Queues"]); len(qs) != 1 || qs[0] != r.eval.refs["DeadLetterQueue"] {
				t.Errorf("%s is for queues %v", id, qs)
			}
		}
		sts, _ := cn.statements(doc)
		c.QueuePolicy = append(c.QueuePolicy, statementSet(sts)...)
		sort.Strings(c.QueuePolicy)
		// EventBridge may deliver to it, from this function's rules only
		s := canonJSON(cn.value(doc))
		if !strings.Contains(s, `"events.amazonaws.com"`) || !strings.Contains(s, `"sqs:SendMessage"`) || !strings.Contains(s, phRules+"*") {
			t.Errorf("the queue policy does not let the rules deliver: %s", s)
		}
	}
}

func (r *samRun) readLogsAndAlarms(t *testing.T, ctx context.Context, c *created) {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	lg, err := cloudwatchlogs.NewFromConfig(cfg).DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String(r.eval.refs["LogGroup"])})
	if err != nil || len(lg.LogGroups) != 1 {
		t.Fatalf("log group: %v", err)
	}
	c.Function["log_retention_days"] = fmt.Sprint(aws.ToInt32(lg.LogGroups[0].RetentionInDays))
	if got, want := c.Function["log_retention_days"], r.resolved(t, "LogGroup")["RetentionInDays"]; got != want {
		t.Errorf("log retention %s days, the template says %v", got, want)
	}
	if got := aws.ToString(lg.LogGroups[0].LogGroupName); got != "/aws/lambda/"+r.fnName {
		t.Errorf("log group %s is not the function's", got)
	}
	ids := r.ofType(t, "AWS::CloudWatch::Alarm")
	var names []string
	for _, id := range ids {
		names = append(names, fmt.Sprint(r.resolved(t, id)["AlarmName"]))
	}
	al, err := cloudWatchAlarmNames(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range al {
		c.Alarms = append(c.Alarms, alarm(r.fnName, a))
	}
	if len(al) == 0 {
		r.skip(t, "AWS::CloudWatch::Alarm", "DescribeAlarms finds none of "+strings.Join(names, ", "))
		for _, a := range names {
			c.Alarms = append(c.Alarms, alarm(r.fnName, a))
		}
		for _, id := range ids {
			p := r.resolved(t, id)
			if p["ComparisonOperator"] != "GreaterThanThreshold" || p["Threshold"] != "0" || p["TreatMissingData"] != "notBreaching" {
				t.Errorf("alarm %v: %v", p["AlarmName"], p)
			}
		}
	} else if len(al) != len(names) {
		t.Errorf("only %v of the alarms %v exist", al, names)
	}
	sort.Strings(c.Alarms)

	for _, id := range r.ofType(t, "AWS::CloudWatch::Dashboard") {
		name := fmt.Sprint(r.resolved(t, id)["DashboardName"])
		d, err := readDashboards(ctx, r.fnName, name)
		if err != nil {
			t.Errorf("the stack's dashboard %s: %v", name, err)
			continue
		}
		c.Dashboards = append(c.Dashboards, d...)
	}
	sort.Strings(c.Dashboards)
}

// readHooks reads the hooks the function put on the listed groups for the
// stack's Custom::LifecycleHooks: one of each asked for on every group.
func (r *samRun) readHooks(t *testing.T, ctx context.Context, c *created) {
	t.Helper()
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	p := r.resolved(t, "LifecycleHooks")
	var names []string
	for _, k := range []string{"Terminate", "Launch"} {
		if fmt.Sprint(p["Create"+k+"Hook"]) == "true" {
			names = append(names, fmt.Sprint(p[k+"HookName"]))
		}
	}
	for _, asg := range samASGs {
		out, err := asc.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(asg)})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range out.LifecycleHooks {
			got = append(got, aws.ToString(h.LifecycleHookName))
			addHook(c, aws.ToString(h.LifecycleTransition), aws.ToString(h.DefaultResult), fmt.Sprint(aws.ToInt32(h.HeartbeatTimeout)), aws.ToString(h.LifecycleHookName))
		}
		sort.Strings(got)
		if !slices.Equal(got, names) {
			t.Errorf("hooks on %s: %v, want %v (the stack's custom resource)", asg, got, names)
		}
	}
	if len(c.Hooks["autoscaling:EC2_INSTANCE_TERMINATING"]) != 3 {
		t.Errorf("terminate hooks differ between the ASGs or are missing: %v", c.Hooks)
	}
}

func (r *samRun) readAccessEntry(t *testing.T, ctx context.Context, c *created) {
	t.Helper()
	for _, id := range r.ofType(t, "AWS::EKS::AccessEntry") {
		p := r.resolved(t, id)
		out, err := eks.NewFromConfig(env.AWS.AWSConfig()).DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{
			ClusterName: aws.String(fmt.Sprint(p["ClusterName"])), PrincipalArn: aws.String(r.roleARN),
		})
		if err == nil && out.AccessEntry != nil {
			c.AccessEntryGroups = append(c.AccessEntryGroups, out.AccessEntry.KubernetesGroups...)
			continue
		}
		r.skip(t, "AWS::EKS::AccessEntry", fmt.Sprintf("DescribeAccessEntry: %v", err))
		if p["PrincipalArn"] != r.roleARN || p["ClusterName"] != harness.ClusterName || p["Type"] != "STANDARD" {
			t.Errorf("the template's access entry: %v", p)
		}
		for _, g := range listOf(p["KubernetesGroups"]) {
			c.AccessEntryGroups = append(c.AccessEntryGroups, fmt.Sprint(g))
		}
	}
	sort.Strings(c.AccessEntryGroups)
}

// drain runs the landed bootstrap with the created function's configuration
// and drains a node of the first ASG through the terminate hook.
// tagDiscovery is checkTagDiscovery with the function as the stack made it
// (its environment, role and settings), after sam_drain mapped its role in
// the cluster and pointed the emulator's EKS cluster at the harness.
func (r *samRun) tagDiscovery(t *testing.T) string {
	ctx := samCtx(t, 5*time.Minute)
	lc := lambda.NewFromConfig(env.AWS.AWSConfig(), func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) })
	f, err := lc.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(r.fnName)})
	if err != nil {
		t.Fatal(err)
	}
	fc := f.Configuration
	checkTagDiscovery(t, ctx, "sam", deployedFunction{
		Bootstrap: bootstrap, Name: aws.ToString(fc.FunctionName), Env: fc.Environment.Variables, RoleARN: aws.ToString(fc.Role),
		TerminateHook: fc.Environment.Variables["TERMINATE_HOOK_NAME"],
		Timeout:       time.Duration(aws.ToInt32(fc.Timeout)) * time.Second, MemoryMB: int(aws.ToInt32(fc.MemorySize)),
	})
	return ""
}

func (r *samRun) drain(t *testing.T) string {
	ctx := samCtx(t, 5*time.Minute)
	samDrain(t, ctx, r)
	return ""
}

// samDrain is the SAM path's drain, self-contained until it is unified with
// terraform's drainWith.
func samDrain(t *testing.T, ctx context.Context, r *samRun) {
	cfg := env.AWS.AWSConfig()
	asg, insts := samASGs[0], r.insts[samASGs[0]]
	target, other := insts[0], insts[1]

	// the terminate hook the function put on the ASG for the stack
	// (Custom::LifecycleHooks, served in sam_deploy)
	hookName := fmt.Sprint(r.resolved(t, "LifecycleHooks")["TerminateHookName"])
	asc := autoscaling.NewFromConfig(cfg)
	hs, err := asc.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(asg), LifecycleHookNames: []string{hookName}})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs.LifecycleHooks) != 1 {
		t.Fatalf("no hook %s on %s: the stack's custom resource did not put it", hookName, asg)
	}

	// the node and its pods
	ns := "sam-drain"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, i := range insts {
		if err := env.AddNodeFor(ctx, i, map[string]string{"pool": asg}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.SetUnschedulable(ctx, other.PrivateDNSName, true); err != nil {
		t.Fatal(err)
	}
	w := harness.Workload{Namespace: ns, Name: "web", Replicas: 2, NodeSelector: map[string]string{"pool": asg}}
	if _, err := env.Deployment(ctx, w, false); err != nil {
		t.Fatal(err)
	}
	if _, err := env.PDB(ctx, w, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodsRunning(ctx, ns, "app=web", 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := env.SetUnschedulable(ctx, other.PrivateDNSName, false); err != nil {
		t.Fatal(err)
	}

	// the function as the stack made it
	var fnLog harness.LogBuffer
	rt := r.startFunction(t, ctx, r.fnName, io.MultiWriter(testWriter{t}, &fnLog))
	defer rt.Stop()

	// the instance starts terminating: the hook's lifecycle action, and the
	// event EventBridge delivers for it (it must match the stack's rule)
	token := "sam-drain-token"
	if err := env.AWS.RegisterLifecycleAction(ctx, moto.LifecycleAction{ASG: asg, Hook: hookName, InstanceID: target.ID, Token: token}); err != nil {
		t.Fatal(err)
	}
	payload, err := harness.EventFile("asg-terminate.json", map[string]string{
		"AutoScalingGroupName": asg, "LifecycleHookName": hookName, "EC2InstanceId": target.ID, "LifecycleActionToken": token,
	})
	if err != nil {
		t.Fatal(err)
	}
	eb := eventbridge.NewFromConfig(cfg)
	rule, err := eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(r.eval.refs["NodeDrainerFunctionTerminateLifecycleAction"])})
	if err != nil {
		t.Fatal(err)
	}
	match, err := eb.TestEventPattern(ctx, &eventbridge.TestEventPatternInput{Event: aws.String(string(payload)), EventPattern: rule.EventPattern})
	switch {
	case err != nil:
		t.Fatalf("TestEventPattern: %v", err)
	case !match.Result:
		t.Fatalf("the terminate event does not match the stack's rule %s", aws.ToString(rule.EventPattern))
	}
	began := time.Now()
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcome in %s: %+v", time.Since(began).Round(10*time.Millisecond), out)
	if out.Action != "drained" || out.LifecycleResult != "CONTINUE" || out.Node != target.PrivateDNSName {
		t.Fatalf("outcome %+v: want drained, CONTINUE, node %s", out, target.PrivateDNSName)
	}
	if !strings.Contains(fnLog.String(), `"mode":"eks"`) {
		t.Errorf("the function did not find the cluster as in EKS (DescribeCluster): no \"mode\":\"eks\" in its log")
	}
	calls, err := env.AWS.LifecycleCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ok []moto.LifecycleCall
	for _, c := range calls {
		if c.Operation == "CompleteLifecycleAction" && c.Params["InstanceId"] == target.ID && c.OK() {
			ok = append(ok, c)
		}
	}
	if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" || ok[0].Params["LifecycleActionToken"] != token || ok[0].Params["LifecycleHookName"] != hookName {
		t.Fatalf("want exactly one CONTINUE of %s with the event's token, got %+v", hookName, ok)
	}
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + target.PrivateDNSName})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods left on the drained node", len(pods.Items))
	}
	n, err := env.Client.CoreV1().Nodes().Get(ctx, target.PrivateDNSName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable || !node.HasTaint(n, node.TaintDraining) {
		t.Errorf("node not cordoned and marked: unschedulable=%v taints=%v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if _, err := env.WaitPodsRunning(ctx, ns, "app=web", 2, time.Minute); err != nil {
		t.Errorf("the drained pods did not come back elsewhere: %v", err)
	}
}

// startFunction runs the landed bootstrap as the stack made the function
// named: its environment, its role's session (mapped in the cluster as the
// access entry says: the token webhook plays it), its timeout, memory and
// retries. The harness adds only AWS_REGION, the endpoints and the
// credentials.
func (r *samRun) startFunction(t *testing.T, ctx context.Context, name string, log io.Writer) *lambdart.Runtime {
	t.Helper()
	cfg := env.AWS.AWSConfig()
	lc := lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) })
	f, err := lc.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	fc := f.Configuration
	creds, err := sts.NewFromConfig(cfg).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: fc.Role, RoleSessionName: fc.FunctionName})
	if err != nil {
		t.Fatalf("assuming the function's role: %v", err)
	}
	var groups []string
	for _, id := range r.ofType(t, "AWS::EKS::AccessEntry") {
		for _, g := range listOf(r.resolved(t, id)["KubernetesGroups"]) {
			groups = append(groups, fmt.Sprint(g))
		}
	}
	role := aws.ToString(fc.Role)
	env.Auth.AddMapping(authwebhook.Mapping{PrincipalARN: role, Username: "node-drainer:{{SessionName}}", Groups: groups})
	r.mapped = role
	var fenv []string
	for k, v := range fc.Environment.Variables {
		fenv = append(fenv, k+"="+v)
	}
	sort.Strings(fenv)
	// the cluster is found as in EKS: DescribeCluster, whose answer the
	// emulator gives the harness's API server
	if err := env.AWS.SetEKSCluster(ctx, fc.Environment.Variables["CLUSTER_NAME"], env.Server, base64.StdEncoding.EncodeToString(env.CAData)); err != nil {
		t.Fatal(err)
	}
	harnessEnv := []string{
		"AWS_REGION=" + moto.Region,
		"AWS_ENDPOINT_URL_EC2=" + env.AWS.URL(),
		"AWS_ENDPOINT_URL_AUTO_SCALING=" + env.AWS.URL(),
		"AWS_ENDPOINT_URL_STS=" + env.AWS.URL(),
		"AWS_ENDPOINT_URL_EKS=" + env.AWS.URL(),
		"AWS_ACCESS_KEY_ID=" + aws.ToString(creds.Credentials.AccessKeyId),
		"AWS_SECRET_ACCESS_KEY=" + aws.ToString(creds.Credentials.SecretAccessKey),
		"AWS_SESSION_TOKEN=" + aws.ToString(creds.Credentials.SessionToken),
	}
	t.Logf("function environment from the stack: %v; the harness adds only AWS_REGION, AWS_ENDPOINT_URL_{EC2,AUTO_SCALING,STS,EKS} and the role's credentials", fenv)
	asyncRetries := lambdart.DefaultAsyncRetries
	if _, err := fmt.Sscan(r.eval.mustStr(t, r.props(r.ofType(t, "AWS::Lambda::EventInvokeConfig")[0])["MaximumRetryAttempts"]), &asyncRetries); err != nil {
		t.Fatalf("the template's MaximumRetryAttempts: %v", err)
	}
	rt, err := lambdart.Start(ctx, lambdart.Options{
		Bootstrap: bootstrap, Env: append(fenv, harnessEnv...), Timeout: time.Duration(aws.ToInt32(fc.Timeout)) * time.Second,
		FunctionName: aws.ToString(fc.FunctionName), MemoryMB: int(aws.ToInt32(fc.MemorySize)), Region: moto.Region,
		AsyncRetries: asyncRetries, Log: log, LambdaAPI: env.AWS.URL(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// delete deletes the stack, after its custom resource's Delete (sc: what
// it must remove and leave; nil: made here, our hook put by the test; fn:
// the deployed function, whose sweep then runs once before the stack's
// delete, as a sweep started in those seconds or retried by Lambda would),
// checks that nothing it made is left, and deletes the lease namespace, as
// docs/deploy.md tells SAM's users (`kubectl delete namespace`).
func (r *samRun) delete(t *testing.T, sc *uninstallScene, fn *deployedFunction) {
	ctx := samCtx(t, 5*time.Minute)
	cfg := env.AWS.AWSConfig()
	r.uninstall(t, ctx, sc, fn)
	if r.mapped != "" {
		env.Auth.RemoveMapping(r.mapped)
	}
	cf := cloudformation.NewFromConfig(cfg)
	if _, err := cf.DeleteStack(ctx, &cloudformation.DeleteStackInput{StackName: aws.String(r.stackID)}); err != nil {
		t.Fatalf("DeleteStack: %v", err)
	}
	if status, reason := r.waitStack(t, ctx, "DELETE_IN_PROGRESS"); status != cftypes.StackStatusDeleteComplete {
		t.Fatalf("stack %s: %s", status, reason)
	}
	asc := autoscaling.NewFromConfig(cfg)
	var left []string
	if r.fnName != "" {
		if _, err := lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.APIOptions = append(o.APIOptions, stringEnvironment) }).GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(r.fnName)}); err == nil {
			left = append(left, "function "+r.fnName)
		}
	}
	if r.roleARN != "" {
		name := r.roleARN[strings.LastIndex(r.roleARN, "/")+1:]
		if _, err := iam.NewFromConfig(cfg).GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(name)}); err == nil {
			left = append(left, "role "+name)
		}
	}
	// everything the stack names starts with its FunctionName
	prefix := r.params["FunctionName"]
	if prefix == "" {
		prefix = "node-drainer" // the template's default
	}
	rules, err := eventbridge.NewFromConfig(cfg).ListRules(ctx, &eventbridge.ListRulesInput{NamePrefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	for _, ru := range rules.Rules {
		left = append(left, "rule "+aws.ToString(ru.Name))
	}
	qs, err := sqs.NewFromConfig(cfg).ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs.QueueUrls {
		left = append(left, "queue "+q)
	}
	lg, err := cloudwatchlogs.NewFromConfig(cfg).DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String("/aws/lambda/" + prefix)})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range lg.LogGroups {
		left = append(left, "log group "+aws.ToString(g.LogGroupName))
	}
	al, err := cloudWatchAlarmNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range al {
		if strings.HasPrefix(a, prefix) {
			left = append(left, "alarm "+a)
		}
	}
	for _, a := range samASGs {
		hs, err := asc.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(a)})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs.LifecycleHooks {
			if aws.ToString(h.LifecycleHookName) != otherToolHook {
				left = append(left, "hook "+a+"/"+aws.ToString(h.LifecycleHookName))
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("left behind after DeleteStack: %s", strings.Join(left, "; "))
	} else {
		t.Log("DeleteStack: DELETE_COMPLETE, no function, role, rule, queue, log group, alarm or hook left")
	}
	deleteLeaseNamespace(t, ctx, r.params["LeaseNamespace"])
	// sam deploy's artifact bucket is not the stack's (SAM keeps its managed
	// bucket); the test removes its own
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	objs, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(samBucket)})
	if err == nil {
		for _, o := range objs.Contents {
			_, _ = s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(samBucket), Key: o.Key})
		}
		_, _ = s3c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(samBucket)})
	}
}

func (e *cfnEval) mustStr(t *testing.T, v any) string {
	t.Helper()
	s, err := e.str(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// jsonEqual compares two values as JSON, numbers and strings alike (the
// resolved template has numbers as strings, the services answer numbers).
func jsonEqual(a, b any) bool {
	return normJSON(a) == normJSON(b)
}

func normJSON(v any) string {
	return canonJSON(cfnStrings(v))
}

// cfnStrings turns every number and boolean into its text, as
// CloudFormation sends a custom resource's properties and as the
// emulator's resources hold them (nil stays nil).
func cfnStrings(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cfnStrings(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cfnStrings(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	case json.Number:
		return x.String()
	case float64, int, int32, int64, bool:
		return fmt.Sprint(x)
	}
	return v
}

// cloudWatchAlarmNames lists the emulator's metric alarms (all of them, or
// those named) through CloudWatch's query protocol: the SDK's CloudWatch
// client speaks Smithy RPCv2 CBOR, which moto 5.2.1 does not serve.
func cloudWatchAlarmNames(ctx context.Context, names ...string) ([]string, error) {
	form := url.Values{"Action": {"DescribeAlarms"}}
	for i, n := range names {
		form.Set(fmt.Sprintf("AlarmNames.member.%d", i+1), n)
	}
	b, err := env.AWS.Query(ctx, "monitoring", "2010-08-01", form)
	if err != nil {
		return nil, err
	}
	var out struct {
		Names []string `xml:"DescribeAlarmsResult>MetricAlarms>member>AlarmName"`
	}
	if err := xml.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("DescribeAlarms: %w", err)
	}
	return out.Names, nil
}

// stringEnvironment makes the function's environment variables strings in
// GetFunction's answer before the SDK decodes it: the emulator's
// CloudFormation passes a Number parameter's Ref on as a JSON number (real
// CloudFormation passes strings), and the SDK refuses a number there.
func stringEnvironment(stack *smithymiddleware.Stack) error {
	return stack.Deserialize.Add(smithymiddleware.DeserializeMiddlewareFunc("stringEnvironment",
		func(ctx context.Context, in smithymiddleware.DeserializeInput, next smithymiddleware.DeserializeHandler) (smithymiddleware.DeserializeOutput, smithymiddleware.Metadata, error) {
			out, md, err := next.HandleDeserialize(ctx, in)
			if err != nil {
				return out, md, err
			}
			resp, ok := out.RawResponse.(*smithyhttp.Response)
			if !ok || resp.StatusCode != http.StatusOK {
				return out, md, err
			}
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr != nil {
				return out, md, rerr
			}
			var doc map[string]any
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber() // 2000000000 stays 2000000000, not 2e+09
			if dec.Decode(&doc) == nil {
				cfg, _ := doc["Configuration"].(map[string]any)
				if cfg == nil {
					cfg = doc
				}
				envv, _ := cfg["Environment"].(map[string]any)
				vars, _ := envv["Variables"].(map[string]any)
				for k, v := range vars {
					if _, isString := v.(string); !isString {
						vars[k] = fmt.Sprint(v)
						numericEnv.Store(k, true)
					}
				}
				if nb, merr := json.Marshal(doc); merr == nil {
					b = nb
				}
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
			return out, md, err
		}), smithymiddleware.After)
}

// numericEnv records the variables the emulator answered as numbers.
var numericEnv sync.Map
