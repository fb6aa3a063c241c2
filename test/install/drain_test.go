package install

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	ststypes "github.com/aws/aws-sdk-go-v2/service/sts/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// drainScene is an Auto Scaling group of the emulator whose instances each
// have a (kwok) node in the harness cluster, labelled pool=<ASG>, and a
// namespace of the same name for the scene's pods. It has no lifecycle hooks:
// the deploy path under test creates them.
type drainScene struct {
	ASG       string
	Instances []harness.Instance
	Namespace string
}

// newDrainScene creates the group (name, n instances, cluster tag
// kubernetes.io/cluster/<harness.ClusterName>), the nodes and the namespace.
func newDrainScene(t *testing.T, ctx context.Context, name string, n int) *drainScene {
	t.Helper()
	return newDrainSceneTagged(t, ctx, name, n, nil)
}

// newDrainSceneTagged is newDrainScene of a group carrying tags too.
func newDrainSceneTagged(t *testing.T, ctx context.Context, name string, n int, tags map[string]string) *drainScene {
	t.Helper()
	insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: name, Size: n, Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range insts {
		if err := env.AddNodeFor(ctx, i, map[string]string{"pool": name}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Namespace(ctx, name); err != nil {
		t.Fatal(err)
	}
	return &drainScene{ASG: name, Instances: insts, Namespace: name}
}

// deployedFunction is what a deploy path created for the function, read back
// from the emulator (never from the path's source).
type deployedFunction struct {
	// Bootstrap is the binary to run: the one in the package the path
	// deployed (the caller checks the function's CodeSha256 against it).
	Bootstrap string
	// Name is the Lambda function's name (AWS_LAMBDA_FUNCTION_NAME).
	Name string
	// Env is the function's environment exactly as Lambda holds it
	// (GetFunctionConfiguration's Environment.Variables).
	Env map[string]string
	// RoleARN is the function's execution role; the function runs with
	// credentials of this role, assumed through the emulator's STS, as Lambda
	// does. Its EKS access entry (created by the path) is what maps it to a
	// Kubernetes identity: the harness's token webhook reads access entries.
	RoleARN string
	// TerminateHook is the name of the terminate lifecycle hook the path
	// created on the scene's ASG; the lifecycle action and event name it.
	TerminateHook string
	// Timeout and MemoryMB are the function's settings (Lambda's Timeout and
	// MemorySize); Timeout bounds the invocation.
	Timeout  time.Duration
	MemoryMB int
}

// drainWith runs the landed bootstrap (fn.Bootstrap) under the Lambda runtime
// emulator with exactly fn.Env plus only what must point at the harness: the
// AWS endpoint URLs of the emulator, AWS_REGION, and the credentials of
// fn.RoleARN assumed through the emulator's STS (the runtime emulator adds the
// Lambda variables and AWS_ENDPOINT_URL_LAMBDA). Nothing of the harness's own
// drainer identity (role node-drainer) is used.
//
// It puts a Deployment of 2 replicas and a bare pod on the first instance's
// node (the others stay schedulable), starts terminating that instance as the
// ASG would under fn.TerminateHook (an active lifecycle action, and the
// EventBridge event of events/asg-terminate.json naming the group, the hook,
// the instance and a fresh token), invokes the function synchronously, and
// fails t unless: the invocation succeeded, the node is cordoned, no pod of
// the scene is left on it, the Deployment's pods run on other nodes, and the
// lifecycle action was completed exactly once, successfully, with CONTINUE and
// the event's token. The scene's ASG must be in fn.Env's ASG_NAMES, or the
// function must choose groups by tag (ASG_TAG_KEY; whether the group carries
// the tag is the function's to read).
func drainWith(t *testing.T, ctx context.Context, s *drainScene, fn deployedFunction) {
	t.Helper()
	drainInstance(t, ctx, s, fn, 0, "")
}

// drainInstance is drainWith for the scene's instance i, its workloads named
// web<suffix> and bare<suffix> (a scene drained more than once); it returns
// everything the function wrote (its output and the runtime's platform
// lines), as Lambda would send it to CloudWatch Logs.
func drainInstance(t *testing.T, ctx context.Context, s *drainScene, fn deployedFunction, i int, suffix string) string {
	t.Helper()
	if !strings.Contains(","+fn.Env["ASG_NAMES"]+",", ","+s.ASG+",") && fn.Env["ASG_TAG_KEY"] == "" {
		t.Fatalf("the function's ASG_NAMES %q do not include the scene's group %s, and it chooses no groups by tag", fn.Env["ASG_NAMES"], s.ASG)
	}
	target := s.Instances[i]
	web, bare := "web"+suffix, "bare"+suffix

	// pods on the target only: cordon the others while they are created
	var others []harness.Instance
	for j, o := range s.Instances {
		if j != i {
			others = append(others, o)
		}
	}
	unschedulable := map[string]bool{}
	for _, o := range others {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, o.PrivateDNSName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		unschedulable[o.PrivateDNSName] = n.Spec.Unschedulable // a node drained before stays cordoned
		if err := env.SetUnschedulable(ctx, o.PrivateDNSName, true); err != nil {
			t.Fatal(err)
		}
	}
	w := harness.Workload{Namespace: s.Namespace, Name: web, Replicas: 2, NodeSelector: map[string]string{"pool": s.ASG}}
	if _, err := env.Deployment(ctx, w, false); err != nil {
		t.Fatal(err)
	}
	if _, err := env.BarePod(ctx, harness.Workload{Namespace: s.Namespace, Name: bare}, target.PrivateDNSName); err != nil {
		t.Fatal(err)
	}
	for sel, n := range map[string]int{"app=" + web: 2, "app=" + bare: 1} {
		if _, err := env.WaitPodsRunning(ctx, s.Namespace, sel, n, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range others {
		if err := env.SetUnschedulable(ctx, o.PrivateDNSName, unschedulable[o.PrivateDNSName]); err != nil {
			t.Fatal(err)
		}
	}

	var log harness.LogBuffer
	rt := startDeployed(t, ctx, fn, &log)

	token := fmt.Sprintf("token-%s-%d", s.ASG, time.Now().UnixNano())
	if err := env.AWS.RegisterLifecycleAction(ctx, moto.LifecycleAction{ASG: s.ASG, Hook: fn.TerminateHook, InstanceID: target.ID, Token: token}); err != nil {
		t.Fatal(err)
	}
	payload, err := harness.EventFile("asg-terminate.json", map[string]string{
		"AutoScalingGroupName": s.ASG, "LifecycleHookName": fn.TerminateHook, "EC2InstanceId": target.ID, "LifecycleActionToken": token,
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		t.Fatalf("invoking the deployed function: %v", err)
	}
	t.Logf("outcome: %+v", out)

	n, err := env.Client.CoreV1().Nodes().Get(ctx, target.PrivateDNSName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable {
		t.Errorf("node %s is not cordoned", n.Name)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + target.PrivateDNSName})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		pods, _ := env.Client.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + target.PrivateDNSName})
		t.Errorf("pods left on %s after the drain: %v", target.PrivateDNSName, podNames(pods.Items))
	}
	moved, err := env.WaitPodsRunning(ctx, s.Namespace, "app="+web, 2, time.Minute)
	if err != nil {
		t.Errorf("the Deployment's pods did not come back on other nodes: %v", err)
	}
	for _, p := range moved {
		if p.Spec.NodeName == target.PrivateDNSName {
			t.Errorf("pod %s still on the drained node", p.Name)
		}
	}

	calls, err := env.AWS.LifecycleCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var completes []moto.LifecycleCall
	for _, c := range calls {
		if c.Operation == "CompleteLifecycleAction" && c.Params["AutoScalingGroupName"] == s.ASG && c.Params["InstanceId"] == target.ID {
			completes = append(completes, c)
		}
	}
	if len(completes) != 1 {
		t.Fatalf("want one CompleteLifecycleAction on %s for %s, got %+v", s.ASG, target.ID, completes)
	}
	c := completes[0]
	if !c.OK() || c.Params["LifecycleActionResult"] != "CONTINUE" || c.Params["LifecycleActionToken"] != token ||
		c.Params["LifecycleHookName"] != fn.TerminateHook || c.Params["InstanceId"] != target.ID {
		t.Errorf("CompleteLifecycleAction: got %+v, want ok, CONTINUE, token %s, hook %s, instance %s", c, token, fn.TerminateHook, target.ID)
	}
	return log.String()
}

// assumeRole assumes roleARN through the emulator's STS, as Lambda does for
// a function.
func assumeRole(ctx context.Context, roleARN, session string) (*ststypes.Credentials, error) {
	out, err := sts.NewFromConfig(env.AWS.AWSConfig()).AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn: aws.String(roleARN), RoleSessionName: aws.String(session),
	})
	if err != nil {
		return nil, fmt.Errorf("assuming the function's role %s: %w", roleARN, err)
	}
	return out.Credentials, nil
}

// startDeployed starts the bootstrap under the runtime emulator as fn (see
// drainWith) and stops it when t ends; what the function writes goes to the
// test's log and to logs.
func startDeployed(t *testing.T, ctx context.Context, fn deployedFunction, logs ...io.Writer) *lambdart.Runtime {
	t.Helper()
	rt, err := runDeployed(ctx, fn, io.MultiWriter(append([]io.Writer{testWriter{t}}, logs...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop() })
	return rt
}

// runDeployed starts the bootstrap under the runtime emulator as fn: exactly
// fn.Env, plus what must point at the harness (the emulator's endpoints and
// region) and the credentials of fn's role.
func runDeployed(ctx context.Context, fn deployedFunction, log io.Writer) (*lambdart.Runtime, error) {
	creds, err := assumeRole(ctx, fn.RoleARN, fn.Name)
	if err != nil {
		return nil, err
	}
	var fnEnv []string
	for k, v := range fn.Env {
		fnEnv = append(fnEnv, k+"="+v)
	}
	url := env.AWS.URL()
	fnEnv = append(fnEnv,
		"AWS_REGION="+moto.Region,
		"AWS_ENDPOINT_URL_EC2="+url,
		"AWS_ENDPOINT_URL_AUTO_SCALING="+url,
		"AWS_ENDPOINT_URL_STS="+url,
		"AWS_ENDPOINT_URL_EKS="+url,
		"AWS_ENDPOINT_URL_SQS="+url,
		"AWS_ENDPOINT_URL_EVENTBRIDGE="+url,
		"AWS_ACCESS_KEY_ID="+aws.ToString(creds.AccessKeyId),
		"AWS_SECRET_ACCESS_KEY="+aws.ToString(creds.SecretAccessKey),
		"AWS_SESSION_TOKEN="+aws.ToString(creds.SessionToken),
	)
	// the function's own timeout (its deadline shapes the drain); ctx
	// bounds how long the test waits
	return lambdart.Start(ctx, lambdart.Options{
		Bootstrap: fn.Bootstrap, Env: fnEnv, Timeout: fn.Timeout, FunctionName: fn.Name, MemoryMB: fn.MemoryMB, Log: log,
		LambdaAPI: url, // its other Lambda requests (its own configuration and tags) reach the emulator
	})
}

func podNames(pods []corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
