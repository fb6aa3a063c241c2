// Package conformance holds the simulation's world (test/sim) to reality:
// each behaviour is one assertion, run against both sides, the world of
// `make sim` (a sim.Lab, in a synctest bubble) and the real harness
// (kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok
// at the version `make test` uses; moto with the project's extension).
// `make conformance` prints one line per behaviour with both verdicts, and
// conformance_behaviours= conformance_mismatches=. A behaviour states what
// the real system does (read from its source or its documentation); a side
// that does otherwise fails it. docs/testing.md lists what only one side
// can play, and why.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
	"github.com/node-drainer/node-drainer/test/sim"
)

// Side is one of the two worlds a behaviour is asserted on.
type Side interface {
	Name() string
	Kube() kubernetes.Interface
	// Nodes are two nodes whose kubelets run, for the behaviours' pods.
	Nodes() []string
	// Spare is a node of its own for a behaviour that stops its kubelet.
	Spare() string
	StopKubelet(ctx context.Context, node string) error
	// Unwell is a node of its own for the behaviour whose kubelet reports
	// NotReady while it runs (RuntimeDown).
	Unwell() string
	// RuntimeDown has the node's kubelet report NotReady from now on while
	// it runs and renews its Lease (its container runtime down).
	RuntimeDown(ctx context.Context, node string) error
	// Namespace makes a namespace pods can be created in.
	Namespace(ctx context.Context, name string) error
	// Sleep waits d on the side's clock.
	Sleep(d time.Duration)
	// Compact compacts the side's history (etcd's compaction) up to now.
	Compact(ctx context.Context) error
	ASG() sim.ASGAPI
	EC2() sim.EC2API
	// Terminating is an instance whose terminate hook's action waits
	// (Terminating:Wait): its group, id and the action's token.
	Terminating(ctx context.Context) (group, id, token string, err error)
	// TerminatingTwo is Terminating in a group with a second terminate
	// hook (OtherHook, another tool's), whose action waits too (other: its
	// token).
	TerminatingTwo(ctx context.Context) (group, id, token, other string, err error)
	// Stopped is an instance its user stopped (hibernate: hibernated).
	Stopped(ctx context.Context, hibernate bool) (id string, err error)
	// RefuseEviction has admission refuse the eviction of pod in ns with
	// code: 422 and 403 from a ValidatingAdmissionPolicy, 500 from a
	// webhook that cannot be called (failurePolicy Fail).
	RefuseEviction(ctx context.Context, ns, pod string, code int32) (lift func(context.Context) error, err error)
}

// simSide is the world of test/sim.
type simSide struct {
	lab  *sim.Lab
	next int // the next node of the lab's for an AWS behaviour
}

// simNodes: two for the pods, a spare, eleven for the AWS behaviours
// (node), the last for Unwell.
const simNodes = 17

func newSimSide() *simSide { return &simSide{lab: sim.NewLab(simNodes), next: 3} }

func (s *simSide) Name() string               { return "sim" }
func (s *simSide) Kube() kubernetes.Interface { return s.lab.Kube() }
func (s *simSide) Nodes() []string            { return s.lab.Nodes()[:2] }
func (s *simSide) Spare() string              { return s.lab.Nodes()[2] }
func (s *simSide) StopKubelet(_ context.Context, node string) error {
	return s.onNode(node, s.lab.StopKubelet)
}
func (s *simSide) Unwell() string { return s.lab.Nodes()[simNodes-1] }
func (s *simSide) RuntimeDown(_ context.Context, node string) error {
	return s.onNode(node, s.lab.RuntimeDown)
}

// onNode calls f with the lab's index of node.
func (s *simSide) onNode(node string, f func(i int)) error {
	i := slices.Index(s.lab.Nodes(), node)
	if i < 0 {
		return fmt.Errorf("no node %s", node)
	}
	f(i)
	return nil
}
func (s *simSide) Namespace(ctx context.Context, name string) error {
	_, err := s.Kube().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}
func (s *simSide) Sleep(d time.Duration)         { time.Sleep(d) }
func (s *simSide) Compact(context.Context) error { s.lab.Compact(); return nil }
func (s *simSide) ASG() sim.ASGAPI               { return s.lab.ASG() }
func (s *simSide) EC2() sim.EC2API               { return s.lab.EC2() }

func (s *simSide) node() (int, error) {
	if s.next >= simNodes-1 {
		return 0, fmt.Errorf("the lab has no instance left")
	}
	s.next++
	return s.next - 1, nil
}

func (s *simSide) Terminating(context.Context) (string, string, string, error) {
	i, err := s.node()
	if err != nil {
		return "", "", "", err
	}
	tok, err := s.lab.StartTerminating(i)
	return sim.LabGroup, s.lab.InstanceID(i), tok, err
}

func (s *simSide) TerminatingTwo(context.Context) (string, string, string, string, error) {
	i, err := s.node()
	if err != nil {
		return "", "", "", "", err
	}
	group, tok, other, err := s.lab.StartTerminatingTwo(i, OtherHook)
	return group, s.lab.InstanceID(i), tok, other, err
}

func (s *simSide) Stopped(_ context.Context, hibernate bool) (string, error) {
	i, err := s.node()
	if err != nil {
		return "", err
	}
	s.lab.Stopping(i, hibernate)
	return s.lab.InstanceID(i), nil
}

func (s *simSide) RefuseEviction(_ context.Context, _, pod string, code int32) (func(context.Context) error, error) {
	lift := s.lab.RefuseEvictions(pod, int(code))
	return func(context.Context) error { lift(); return nil }, nil
}

// realSide is the real harness.
type realSide struct {
	e     *harness.Env
	nodes []string
	asgs  atomic.Int32
}

func newRealSide(ctx context.Context, e *harness.Env) (*realSide, error) {
	r := &realSide{e: e}
	for i := range 4 { // two for the pods, the spare, the unwell one
		name := fmt.Sprintf("ip-10-9-0-%d.ec2.internal", 10+i)
		if _, err := e.AddNode(ctx, harness.NodeSpec{Name: name, InstanceID: fmt.Sprintf("i-0c0f%013d", i), Zone: harness.Zone}); err != nil {
			return nil, err
		}
		r.nodes = append(r.nodes, name)
	}
	return r, nil
}

func (r *realSide) Name() string               { return "real" }
func (r *realSide) Kube() kubernetes.Interface { return r.e.Client }
func (r *realSide) Nodes() []string            { return r.nodes[:2] }
func (r *realSide) Spare() string              { return r.nodes[2] }
func (r *realSide) StopKubelet(ctx context.Context, node string) error {
	return r.e.StopKubelet(ctx, node)
}
func (r *realSide) Unwell() string { return r.nodes[3] }
func (r *realSide) RuntimeDown(ctx context.Context, node string) error {
	return r.e.RuntimeDown(ctx, node)
}
func (r *realSide) Namespace(ctx context.Context, name string) error {
	return r.e.Namespace(ctx, name)
}
func (r *realSide) Sleep(d time.Duration) { time.Sleep(d) }
func (r *realSide) ASG() sim.ASGAPI       { return autoscaling.NewFromConfig(r.e.AWS.AWSConfig()) }
func (r *realSide) EC2() sim.EC2API       { return ec2.NewFromConfig(r.e.AWS.AWSConfig()) }

// Compact asks etcd (its JSON gateway) for its revision and compacts to it.
func (r *realSide) Compact(ctx context.Context) error {
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := r.etcd(ctx, "/v3/kv/range", map[string]any{"key": "AA=="}, &rng); err != nil {
		return err
	}
	return r.etcd(ctx, "/v3/kv/compaction", map[string]any{"revision": rng.Header.Revision, "physical": true}, nil)
}

func (r *realSide) etcd(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.e.Etcd+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s", path, resp.Status)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

func (r *realSide) instance(ctx context.Context) (string, harness.Instance, error) {
	name := fmt.Sprintf("conf-%d", r.asgs.Add(1))
	insts, err := r.e.CreateASG(ctx, harness.ASGSpec{Name: name, Size: 1, Hooks: true})
	if err != nil {
		return "", harness.Instance{}, err
	}
	if len(insts) != 1 {
		return "", harness.Instance{}, fmt.Errorf("ASG %s has %d instances", name, len(insts))
	}
	return name, insts[0], nil
}

func (r *realSide) Terminating(ctx context.Context) (string, string, string, error) {
	group, inst, err := r.instance(ctx)
	if err != nil {
		return "", "", "", err
	}
	tok := "token-" + group
	_, err = r.e.StartTerminating(ctx, group, inst, tok)
	return group, inst.ID, tok, err
}

func (r *realSide) TerminatingTwo(ctx context.Context) (string, string, string, string, error) {
	group, inst, err := r.instance(ctx)
	if err != nil {
		return "", "", "", "", err
	}
	_, err = autoscaling.NewFromConfig(r.e.AWS.AWSConfig()).PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(group), LifecycleHookName: aws.String(OtherHook),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300)})
	if err != nil {
		return "", "", "", "", err
	}
	tok, other := "token-"+group, "token-other-"+group
	if _, err := r.e.StartTerminating(ctx, group, inst, tok); err != nil {
		return "", "", "", "", err
	}
	err = r.e.AWS.RegisterLifecycleAction(ctx, moto.LifecycleAction{ASG: group, Hook: OtherHook, InstanceID: inst.ID, Token: other})
	return group, inst.ID, tok, other, err
}

func (r *realSide) Stopped(ctx context.Context, hibernate bool) (string, error) {
	group, inst, err := r.instance(ctx)
	if err != nil {
		return "", err
	}
	if hibernate { // only an instance launched with hibernation configured can hibernate
		if inst, err = r.e.AddHibernatableInstance(ctx, group); err != nil {
			return "", err
		}
	}
	_, err = ec2.NewFromConfig(r.e.AWS.AWSConfig()).StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{inst.ID}, Hibernate: aws.Bool(hibernate)})
	return inst.ID, err
}

func (r *realSide) RefuseEviction(ctx context.Context, ns, pod string, code int32) (func(context.Context) error, error) {
	name := "conf-refuse-" + ns
	switch code {
	case http.StatusUnprocessableEntity:
		return r.e.RefuseEviction(ctx, name, ns, pod, metav1.StatusReasonInvalid, "evictions of "+pod+" are frozen")
	case http.StatusForbidden:
		return r.e.RefuseEviction(ctx, name, ns, pod, metav1.StatusReasonForbidden, "evictions of "+pod+" are frozen")
	case http.StatusInternalServerError:
		return r.e.RefuseEvictionByWebhook(ctx, name, ns, pod)
	}
	return nil, fmt.Errorf("no admission refusal answers %d", code)
}
