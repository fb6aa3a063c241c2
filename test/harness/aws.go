package harness

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/node-drainer/node-drainer/test/harness/authwebhook"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

const (
	// ClusterName is the harness cluster's name (EKS name / authenticator cluster id).
	ClusterName = "testenv"
	// DrainerRole is the IAM role the drainer runs as; the token webhook maps
	// it to the group the project's ClusterRole is bound to.
	DrainerRole = "node-drainer"
	// DrainerGroup is the Kubernetes group of the drainer's identity.
	DrainerGroup = "node-drainer"
	// Zone is where the scenes' instances, nodes and volumes live.
	Zone = "us-east-1a"
)

// startAuthWebhook starts the token webhook and returns its kubeconfig for
// the apiserver. The role node-drainer maps to group node-drainer, like an EKS
// access entry with kubernetesGroups [node-drainer]; any other principal is
// looked up in the emulator's EKS access entries of cluster ClusterName (the
// ones terraform or CloudFormation create), as EKS does.
func (e *Env) startAuthWebhook(ctx context.Context) (string, error) {
	var err error
	e.Auth, err = authwebhook.Start(ctx, authwebhook.Options{
		STSEndpoint: e.AWS.URL(),
		Lookup:      e.lookupAccessEntry,
		Mappings: []authwebhook.Mapping{{
			PrincipalARN: fmt.Sprintf("arn:aws:iam::%s:role/%s", moto.AccountID, DrainerRole),
			Username:     "node-drainer:{{SessionName}}",
			Groups:       []string{DrainerGroup},
		}},
	})
	if err != nil {
		return "", fmt.Errorf("starting the token webhook: %w", err)
	}
	path := filepath.Join(e.Dir, "webhook.kubeconfig")
	return path, e.Auth.WriteKubeconfig(path)
}

// lookupAccessEntry maps a principal by its EKS access entry in the emulator.
func (e *Env) lookupAccessEntry(ctx context.Context, principal string) (authwebhook.Mapping, bool, error) {
	out, err := eks.NewFromConfig(e.AWS.AWSConfig()).DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{
		ClusterName: aws.String(ClusterName), PrincipalArn: aws.String(principal),
	})
	var nf *ekstypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return authwebhook.Mapping{}, false, nil
	}
	if err != nil {
		return authwebhook.Mapping{}, false, err
	}
	a := out.AccessEntry
	if aws.ToString(a.Type) != "STANDARD" {
		return authwebhook.Mapping{}, false, nil
	}
	return authwebhook.Mapping{Username: aws.ToString(a.Username), Groups: a.KubernetesGroups}, true, nil
}

// CreateEKSCluster creates the harness cluster (ClusterName) in the emulator's
// EKS, with DescribeCluster answering the harness's apiserver endpoint and CA,
// as data.aws_eks_cluster and the function in EKS mode read them.
func (e *Env) CreateEKSCluster(ctx context.Context) error {
	_, err := eks.NewFromConfig(e.AWS.AWSConfig()).CreateCluster(ctx, &eks.CreateClusterInput{
		Name:               aws.String(ClusterName),
		RoleArn:            aws.String(fmt.Sprintf("arn:aws:iam::%s:role/eks-cluster", moto.AccountID)),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-00000001"}},
		AccessConfig:       &ekstypes.CreateAccessConfigRequest{AuthenticationMode: ekstypes.AuthenticationModeApi},
	})
	var inUse *ekstypes.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("creating EKS cluster %s: %w", ClusterName, err)
	}
	return e.AWS.SetEKSCluster(ctx, ClusterName, e.Server, base64.StdEncoding.EncodeToString(e.CAData))
}

// RBACFile is one of the project's RBAC manifests (terraform/kubernetes/):
// rbac.yaml, rbac-lease-namespace.yaml or rbac-delete-nodes.yaml.
func RBACFile(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "terraform", "kubernetes", name), nil
}

// LeaseNamespace is the harness's drainer's LEASE_NAMESPACE (the default).
const LeaseNamespace = "node-drainer"

// applyRBAC applies the project's RBAC as a user does for the harness's
// drainer (LEASE_NAMESPACE node-drainer, DELETE_TERMINATED_NODES on in some
// scenes): rbac.yaml, the lease namespace with rbac-lease-namespace.yaml in
// it, and rbac-delete-nodes.yaml; so the drainer runs with exactly the
// permissions users grant it.
func (e *Env) applyRBAC(ctx context.Context) error {
	if err := e.applyManifest(ctx, "rbac.yaml", ""); err != nil {
		return err
	}
	if err := e.ApplyLeaseNamespaceRBAC(ctx, LeaseNamespace); err != nil {
		return err
	}
	return e.applyManifest(ctx, "rbac-delete-nodes.yaml", "")
}

// ApplyLeaseNamespaceRBAC creates the namespace ns and applies
// rbac-lease-namespace.yaml into it, as its comment tells users
// (kubectl create namespace ns; kubectl apply -n ns -f ...).
func (e *Env) ApplyLeaseNamespaceRBAC(ctx context.Context, ns string) error {
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the lease namespace %s: %w", ns, err)
	}
	return e.applyManifest(ctx, "rbac-lease-namespace.yaml", ns)
}

// applyManifest creates each object of one RBAC manifest (objects that exist
// are left as they are); ns is kubectl's -n: the namespace of namespaced
// objects that name none, and an error for one that names another.
func (e *Env) applyManifest(ctx context.Context, name, ns string) error {
	path, err := RBACFile(name)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the RBAC manifest: %w", err)
	}
	namespace := func(o metav1.Object) error {
		switch {
		case o.GetNamespace() == "":
			o.SetNamespace(ns)
		case ns != "" && o.GetNamespace() != ns:
			return fmt.Errorf("%s: %s is in namespace %s, not %s", path, o.GetName(), o.GetNamespace(), ns)
		}
		if o.GetNamespace() == "" {
			return fmt.Errorf("%s: %s names no namespace and none is given", path, o.GetName())
		}
		// kube-node-lease is the apiserver's own, created soon after it starts
		return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := e.Client.CoreV1().Namespaces().Get(ctx, o.GetNamespace(), metav1.GetOptions{})
			return err == nil, nil
		})
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = e.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = e.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Namespace:
			_, err = e.Client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			if err = namespace(o); err == nil {
				_, err = e.Client.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			}
		case *rbacv1.RoleBinding:
			if err = namespace(o); err == nil {
				_, err = e.Client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			}
		case *flowcontrolv1.PriorityLevelConfiguration:
			_, err = e.Client.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, o, metav1.CreateOptions{})
		case *flowcontrolv1.FlowSchema:
			_, err = e.Client.FlowcontrolV1().FlowSchemas().Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unexpected %T in %s", obj, path)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("applying %s: %w", path, err)
		}
	}
	return nil
}

// ApplyRBAC applies the project's RBAC again (objects that exist are left as
// they are): a test that removed it, to let a deploy path create and delete
// it, puts it back for the tests after it.
func (e *Env) ApplyRBAC(ctx context.Context) error { return e.applyRBAC(ctx) }

// DrainerCredentials assumes the drainer's role in the emulator, as Lambda
// does for the function; the credentials' identity is what the webhook maps.
func (e *Env) DrainerCredentials(ctx context.Context, session string) (aws.Credentials, error) {
	out, err := sts.NewFromConfig(e.AWS.AWSConfig()).AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn:         aws.String(fmt.Sprintf("arn:aws:iam::%s:role/%s", moto.AccountID, DrainerRole)),
		RoleSessionName: aws.String(session),
	})
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("assuming the drainer role: %w", err)
	}
	c := out.Credentials
	return aws.Credentials{AccessKeyID: *c.AccessKeyId, SecretAccessKey: *c.SecretAccessKey, SessionToken: *c.SessionToken}, nil
}

// DrainerEnv is the function's environment against this harness: the
// self-managed cluster mode (endpoint + CA, STS tokens through the webhook),
// every AWS client pointed at the emulator, the drainer role's credentials.
// extra entries (NAME=value) come last and win.
func (e *Env) DrainerEnv(ctx context.Context, extra ...string) ([]string, error) {
	creds, err := e.DrainerCredentials(ctx, "lambda")
	if err != nil {
		return nil, err
	}
	env := []string{
		"CLUSTER_NAME=" + ClusterName,
		"CLUSTER_ENDPOINT=" + e.Server,
		"CLUSTER_CA_DATA=" + base64.StdEncoding.EncodeToString(e.CAData),
		"AWS_REGION=" + moto.Region,
		"AWS_ENDPOINT_URL_EC2=" + e.AWS.URL(),
		"AWS_ENDPOINT_URL_AUTO_SCALING=" + e.AWS.URL(),
		"AWS_ENDPOINT_URL_STS=" + e.AWS.URL(),
		"AWS_ENDPOINT_URL_EKS=" + e.AWS.URL(),
		"AWS_ENDPOINT_URL_EVENTBRIDGE=" + e.AWS.URL(),
		"AWS_ACCESS_KEY_ID=" + creds.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + creds.SecretAccessKey,
		"AWS_SESSION_TOKEN=" + creds.SessionToken,
	}
	return append(env, extra...), nil
}

// Instance is an EC2 instance of a scene's ASG.
type Instance struct {
	ID, PrivateDNSName, Zone string
}

// ASGSpec describes an Auto Scaling group of this cluster.
type ASGSpec struct {
	Name       string
	Size       int
	Hooks      bool   // terminate and launch lifecycle hooks
	ClusterTag string // tag key marking the cluster's instances; default kubernetes.io/cluster/testenv
	// Tags are more tags of the group (not propagated to its instances),
	// such as the one that selects node groups (ASG_TAG_KEY).
	Tags map[string]string
	// Hibernation launches the group's instances hibernation-configured
	// (their launch template's HibernationOptions), so Hibernate works on
	// any of them.
	Hibernation bool
	// CapacityReservation, if set, is the Capacity Reservation the group's
	// instances run in (their launch template's target), as a Capacity
	// Block's do.
	CapacityReservation string
}

// Hook names the scenes' ASGs use.
const (
	TerminateHook = "node-drainer-terminate"
	LaunchHook    = "node-drainer-launch"
)

// CreateASG creates the group in the emulator (launch template, cluster tag
// propagated to instances, lifecycle hooks) and returns its instances.
func (e *Env) CreateASG(ctx context.Context, s ASGSpec) ([]Instance, error) {
	cfg := e.AWS.AWSConfig()
	ec2c, asc := ec2.NewFromConfig(cfg), autoscaling.NewFromConfig(cfg)
	if s.ClusterTag == "" {
		s.ClusterTag = "kubernetes.io/cluster/" + ClusterName
	}
	lt := s.Name + "-lt"
	data := &ec2types.RequestLaunchTemplateData{ImageId: aws.String("ami-12c6146b"), InstanceType: ec2types.InstanceTypeM5Large}
	if s.Hibernation {
		data.HibernationOptions = &ec2types.LaunchTemplateHibernationOptionsRequest{Configured: aws.Bool(true)}
	}
	if s.CapacityReservation != "" {
		data.CapacityReservationSpecification = &ec2types.LaunchTemplateCapacityReservationSpecificationRequest{
			CapacityReservationTarget: &ec2types.CapacityReservationTarget{CapacityReservationId: aws.String(s.CapacityReservation)}}
	}
	_, err := ec2c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String(lt), LaunchTemplateData: data})
	if err != nil {
		return nil, fmt.Errorf("creating launch template: %w", err)
	}
	size := int32(s.Size)
	tags := []astypes.Tag{{Key: aws.String(s.ClusterTag), Value: aws.String("owned"), PropagateAtLaunch: aws.Bool(true),
		ResourceId: aws.String(s.Name), ResourceType: aws.String("auto-scaling-group")}}
	for k, v := range s.Tags {
		tags = append(tags, astypes.Tag{Key: aws.String(k), Value: aws.String(v), PropagateAtLaunch: aws.Bool(false),
			ResourceId: aws.String(s.Name), ResourceType: aws.String("auto-scaling-group")})
	}
	_, err = asc.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{
		AutoScalingGroupName: aws.String(s.Name),
		LaunchTemplate:       &astypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String(lt)},
		MinSize:              aws.Int32(0), MaxSize: aws.Int32(size + 5), DesiredCapacity: aws.Int32(size),
		AvailabilityZones: []string{Zone},
		Tags:              tags,
	})
	if err != nil {
		return nil, fmt.Errorf("creating ASG %s: %w", s.Name, err)
	}
	if s.Hooks {
		for hook, transition := range map[string]string{TerminateHook: "autoscaling:EC2_INSTANCE_TERMINATING", LaunchHook: "autoscaling:EC2_INSTANCE_LAUNCHING"} {
			_, err := asc.PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
				AutoScalingGroupName: aws.String(s.Name), LifecycleHookName: aws.String(hook),
				LifecycleTransition: aws.String(transition), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
			})
			if err != nil {
				return nil, fmt.Errorf("creating hook %s: %w", hook, err)
			}
		}
	}
	return e.ASGInstances(ctx, s.Name)
}

// ASGInstances returns the instances of an Auto Scaling group of the
// emulator, however it was created (CreateASG, or a deploy path's terraform).
func (e *Env) ASGInstances(ctx context.Context, name string) ([]Instance, error) {
	cfg := e.AWS.AWSConfig()
	ec2c, asc := ec2.NewFromConfig(cfg), autoscaling.NewFromConfig(cfg)
	out, err := asc.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil || len(out.AutoScalingGroups) != 1 {
		return nil, fmt.Errorf("describing ASG %s: %v", name, err)
	}
	var ids []string
	for _, i := range out.AutoScalingGroups[0].Instances {
		ids = append(ids, *i.InstanceId)
	}
	desc, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err != nil {
		return nil, fmt.Errorf("describing instances: %w", err)
	}
	var insts []Instance
	for _, r := range desc.Reservations {
		for _, i := range r.Instances {
			zone := Zone
			if i.Placement != nil && aws.ToString(i.Placement.AvailabilityZone) != "" {
				zone = *i.Placement.AvailabilityZone
			}
			insts = append(insts, Instance{ID: *i.InstanceId, PrivateDNSName: *i.PrivateDnsName, Zone: zone})
		}
	}
	return insts, nil
}

// AddNodeFor registers the kwok node of an instance (named after its private
// DNS name, providerID aws:///<zone>/<id>), with extra labels.
func (e *Env) AddNodeFor(ctx context.Context, i Instance, labels map[string]string) error {
	_, err := e.AddNode(ctx, NodeSpec{Name: i.PrivateDNSName, InstanceID: i.ID, Zone: i.Zone, Labels: labels})
	return err
}

// SetInstanceState stops or starts an instance in the emulator
// ("stopped"/"running").
func (e *Env) SetInstanceState(ctx context.Context, id, state string) error {
	c := ec2.NewFromConfig(e.AWS.AWSConfig())
	var err error
	switch state {
	case "stopped":
		_, err = c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	case "running":
		_, err = c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	case "terminated":
		_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	default:
		err = fmt.Errorf("unsupported state %q", state)
	}
	if err != nil {
		return fmt.Errorf("setting instance %s %s: %w", id, state, err)
	}
	return nil
}

// StartTerminating registers the active lifecycle action the ASG would create
// when it starts terminating the instance, and returns the event payload
// EventBridge would deliver for it, from events/asg-terminate.json.
func (e *Env) StartTerminating(ctx context.Context, asg string, i Instance, token string) ([]byte, error) {
	if err := e.AWS.RegisterLifecycleAction(ctx, moto.LifecycleAction{ASG: asg, Hook: TerminateHook, InstanceID: i.ID, Token: token}); err != nil {
		return nil, err
	}
	return EventFile("asg-terminate.json", map[string]string{
		"AutoScalingGroupName": asg, "LifecycleHookName": TerminateHook, "EC2InstanceId": i.ID, "LifecycleActionToken": token,
	})
}
