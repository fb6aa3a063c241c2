package harness

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// The peer the bench measures node-drainer against:
// aws-node-termination-handler (NTH) in queue mode, built from its published
// Go module by hack/tools/nth.sh and run out of cluster against this
// harness: its SQS queue in the AWS emulator, its AWS endpoint pointed at
// the emulator (its AWS_ENDPOINT setting, "[testing]" in its flags), its
// Kubernetes client at this apiserver.

// PeerGroup is NTH's Kubernetes user and group: a static token of the
// apiserver, bound to a ClusterRole with the rules of NTH's Helm chart.
const PeerGroup = "aws-node-termination-handler"

// PeerManagedTag is the instance tag NTH's queue mode looks for before it
// drains (CHECK_TAG_BEFORE_DRAINING, on by default; MANAGED_TAG).
const PeerManagedTag = "aws-node-termination-handler/managed"

// NTHBinary returns aws-node-termination-handler built by
// hack/tools/nth.sh (the first call builds it into the tools cache, about
// 2-4 minutes on 2 cores). NODE_DRAINER_NTH_BIN names a ready binary instead.
func NTHBinary(ctx context.Context) (string, error) {
	if bin := os.Getenv("NODE_DRAINER_NTH_BIN"); bin != "" {
		_, err := os.Stat(bin)
		return bin, err
	}
	build, err := buildScript()
	if err != nil {
		return "", err
	}
	script := filepath.Join(filepath.Dir(build), "nth.sh")
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building aws-node-termination-handler with %s failed (it needs Go and the module proxy): %w\n%s", script, err, stderr.String())
	}
	bin := strings.TrimSpace(stdout.String())
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s printed %q: %w", script, bin, err)
	}
	return bin, nil
}

// NTHOptions configure StartNTH.
type NTHOptions struct {
	Binary string
	// Name names its queue, log file and working directory; unique per Env.
	Name string
	// Env is its configuration beyond what queue mode against this harness
	// needs (NAME=value, its environment variables; the rest stay at their
	// shipped defaults).
	Env []string
	// Server is the apiserver URL NTH is given (its in-cluster
	// KUBERNETES_SERVICE_HOST and _PORT): a proxy in front of this
	// harness's apiserver serving its certificate (ServingTLS), to record
	// NTH's requests apart from the function's. Empty: the apiserver.
	Server string
}

// NTH is a running aws-node-termination-handler.
type NTH struct {
	QueueURL string
	proc     *process
	aws      *moto.Server
}

// StartNTH creates the peer's SQS queue in the emulator and starts NTH in
// queue mode on it, and returns once NTH says it has started.
//
// NTH builds its Kubernetes client with rest.InClusterConfig only:
// KUBERNETES_SERVICE_HOST/PORT and a service account token and CA at the
// fixed path /var/run/secrets/kubernetes.io/serviceaccount. So it runs in
// a private mount namespace (unshare) where a tmpfs over /run holds a link
// from that path to this harness's token and CA for PeerGroup; nothing
// outside the process sees them. NODE_NAME is required by NTH's flag
// parsing even in queue mode (its chart sets it to the pod's node); it is
// not used to pick what to drain.
func (e *Env) StartNTH(ctx context.Context, o NTHOptions) (*NTH, error) {
	if err := e.applyPeerRBAC(ctx); err != nil {
		return nil, err
	}
	queueURL, err := e.AWS.CreateQueue(ctx, o.Name)
	if err != nil {
		return nil, err
	}
	sa := filepath.Join(e.Dir, o.Name, "serviceaccount")
	if err := os.MkdirAll(sa, 0o755); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{"token": []byte(e.peerUser.token), "ca.crt": e.pki.caPEM, "namespace": []byte("kube-system")} {
		if err := os.WriteFile(filepath.Join(sa, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	server := e.Server
	if o.Server != "" {
		server = o.Server
	}
	u, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	env := []string{
		"NTH_SERVICE_ACCOUNT_DIR=" + sa,
		"NODE_NAME=nth-out-of-cluster",
		"ENABLE_SQS_TERMINATION_DRAINING=true",
		"QUEUE_URL=" + queueURL,
		"AWS_REGION=" + moto.Region,
		"AWS_ENDPOINT=" + e.AWS.URL(),
		"AWS_ACCESS_KEY_ID=" + moto.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + moto.SecretAccessKey,
		"AWS_SESSION_TOKEN=",
		"AWS_PROFILE=", "AWS_DEFAULT_PROFILE=",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_EC2_METADATA_DISABLED=true",
		"KUBERNETES_SERVICE_HOST=" + u.Hostname(),
		"KUBERNETES_SERVICE_PORT=" + u.Port(),
		"KUBECONFIG=",
	}
	env = append(env, o.Env...)
	// the mount namespace: as root plain -m; otherwise in a user namespace
	// where this user is root (-r), which may mount a tmpfs too
	ns := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		ns = append([]string{"--map-root-user"}, ns...)
	}
	const inNS = `set -e
run=$(readlink -f /var/run)
mount -t tmpfs tmpfs "$run"
mkdir -p "$run/secrets/kubernetes.io"
ln -s "$NTH_SERVICE_ACCOUNT_DIR" "$run/secrets/kubernetes.io/serviceaccount"
exec "$0"`
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("running aws-node-termination-handler out of cluster needs unshare (util-linux) for its in-cluster token path: %w", err)
	}
	p, err := e.start(o.Name, unshare, append(ns, "sh", "-c", inNS, o.Binary), env)
	if err != nil {
		return nil, err
	}
	n := &NTH{QueueURL: queueURL, proc: p, aws: e.AWS}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if done, err := p.exited(); done {
			return false, fmt.Errorf("exited: %v", err)
		}
		b, _ := os.ReadFile(p.log)
		return bytes.Contains(b, []byte("has started successfully")), nil
	})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("aws-node-termination-handler did not start: %w\n--- %s log (last lines) ---\n%s", err, o.Name, p.tail(30))
	}
	// its SQS monitor polls on a 2 s ticker: the first long poll starts then
	time.Sleep(2500 * time.Millisecond)
	return n, nil
}

// Send delivers an EventBridge event to NTH's queue (EventBridge's SQS
// target puts the event JSON in the message body).
func (n *NTH) Send(ctx context.Context, event []byte) error {
	return n.aws.SendMessage(ctx, n.QueueURL, string(event))
}

// InFlight is how many messages NTH's queue still holds, received or not.
// NTH deletes a message once its event is done: at once when it drops the
// event (an instance without its managed tag), after the drain and the
// lifecycle action's completion when it acts on it. So 0 after sends means
// NTH is done with every one.
func (n *NTH) InFlight(ctx context.Context) (int, error) {
	b, err := n.aws.Query(ctx, "sqs", "2012-11-05", url.Values{"Action": {"GetQueueAttributes"}, "QueueUrl": {n.QueueURL},
		"AttributeName.1": {"ApproximateNumberOfMessages"}, "AttributeName.2": {"ApproximateNumberOfMessagesNotVisible"}})
	if err != nil {
		return 0, fmt.Errorf("reading the queue of aws-node-termination-handler: %w", err)
	}
	var out struct {
		Attributes []struct {
			Name  string `xml:"Name"`
			Value int    `xml:"Value"`
		} `xml:"GetQueueAttributesResult>Attribute"`
	}
	if err := xml.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("reading the queue of aws-node-termination-handler: %w (%q)", err, b)
	}
	if len(out.Attributes) != 2 {
		return 0, fmt.Errorf("reading the queue of aws-node-termination-handler: want 2 attributes, got %q", b)
	}
	return out.Attributes[0].Value + out.Attributes[1].Value, nil
}

// Running reports an error if NTH has exited, with its last log lines.
func (n *NTH) Running() error {
	if done, err := n.proc.exited(); done {
		return fmt.Errorf("aws-node-termination-handler exited: %v\n%s", err, n.proc.tail(30))
	}
	return nil
}

// Tail returns NTH's last log lines.
func (n *NTH) Tail(lines int) string { return n.proc.tail(lines) }

// Stop stops NTH (the harness's Stop would too).
func (n *NTH) Stop() { n.proc.stop() }

// TagManaged puts NTH's managed tag on instances, as an operator tags the
// ASGs NTH should handle (the tag propagated to their instances).
func (e *Env) TagManaged(ctx context.Context, ids []string) error {
	_, err := ec2.NewFromConfig(e.AWS.AWSConfig()).CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: ids,
		Tags:      []ec2types.Tag{{Key: aws.String(PeerManagedTag), Value: aws.String("")}},
	})
	if err != nil {
		return fmt.Errorf("tagging %v with %s: %w", ids, PeerManagedTag, err)
	}
	return nil
}

// applyPeerRBAC grants PeerGroup what NTH's Helm chart grants its service
// account (v1.25.6 templates/clusterrole.yaml: nodes get/list/patch/update;
// pods get/list; pods/eviction create; daemonsets get; events only with
// emitKubernetesEvents, off by default), and puts its requests in a
// FlowSchema of their own at the priority level workload-high: where a
// service account of kube-system (the chart's documented namespace) lands
// in the default API Priority and Fairness configuration. The FlowSchema
// lets the bench count NTH's requests as it counts the function's.
func (e *Env) applyPeerRBAC(ctx context.Context) error {
	e.mu.Lock()
	done := e.peerRBAC
	e.mu.Unlock()
	if done {
		return nil
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: PeerGroup},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
			{APIGroups: []string{"extensions"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: PeerGroup},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: PeerGroup},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: PeerGroup}},
	}
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: PeerGroup},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "workload-high"},
			MatchingPrecedence:         1000,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: PeerGroup}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"},
				}},
			}},
		},
	}
	for _, create := range []func() error{
		func() error {
			_, err := e.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := e.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := e.Client.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("granting aws-node-termination-handler its chart's RBAC: %w", err)
		}
	}
	e.mu.Lock()
	e.peerRBAC = true
	e.mu.Unlock()
	return nil
}
