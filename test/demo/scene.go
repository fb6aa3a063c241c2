package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
)

// demo is one story's run: the harness, its timeline, the function's logs,
// what failed.
type demo struct {
	env       *harness.Env
	bootstrap string
	tl        *timeline
	logs      *harness.LogBuffer
	failures  []error
	note      string // for the summary table
	scene     *scene // the story's scene, once created
	pv        string // its volume
}

func (d *demo) failf(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	d.failures = append(d.failures, err)
	d.tl.printf("FAIL: %v", err)
}

// scene is a story's slice of the cluster: an ASG whose instances have
// nodes labelled pool=<name>, and a namespace <name>.
type scene struct {
	name  string
	insts []harness.Instance
}

func (d *demo) newScene(ctx context.Context, name string, size int) (*scene, error) {
	insts, err := d.env.CreateASG(ctx, harness.ASGSpec{Name: name, Size: size, Hooks: true})
	if err != nil {
		return nil, err
	}
	s := &scene{name: name, insts: insts}
	var desc []string
	for _, i := range insts {
		if err := d.env.AddNodeFor(ctx, i, map[string]string{"pool": name}); err != nil {
			return nil, err
		}
		desc = append(desc, i.ID+" = node "+short(i.PrivateDNSName))
	}
	if err := d.env.Namespace(ctx, name); err != nil {
		return nil, err
	}
	d.tl.printf("ASG %s (moto): %d instances, their nodes Ready: %s", name, len(insts), strings.Join(desc, ", "))
	return s, nil
}

func (s *scene) workload(name string, replicas int32) harness.Workload {
	return harness.Workload{Namespace: s.name, Name: name, Replicas: replicas, NodeSelector: map[string]string{"pool": s.name}}
}

func (s *scene) nodes() []string {
	var names []string
	for _, i := range s.insts {
		names = append(names, i.PrivateDNSName)
	}
	return names
}

// onlyOn runs build with every node but target cordoned, so the pods it
// creates land on target, then uncordons the others.
func (d *demo) onlyOn(ctx context.Context, s *scene, target harness.Instance, build func() error) error {
	cordon := func(on bool) error {
		for _, i := range s.insts {
			if i.ID != target.ID {
				// SetUnschedulable retries a conflict with the node's own updates
				if err := d.env.SetUnschedulable(ctx, i.PrivateDNSName, on); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := cordon(true); err != nil {
		return err
	}
	if err := build(); err != nil {
		return err
	}
	return cordon(false)
}

// function starts the real bootstrap under the Lambda runtime emulator.
func (d *demo) function(ctx context.Context) (*lambdart.Runtime, error) {
	return d.env.StartFunction(ctx, harness.FunctionOptions{Bootstrap: d.bootstrap, Timeout: 2 * time.Minute, Log: d.logs})
}

// waitAttached waits for the VolumeAttachment of pv on node to be attached
// and returns its name.
func (d *demo) waitAttached(ctx context.Context, pv, node string, timeout time.Duration) (string, error) {
	var name string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		vas, err := d.env.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, va := range vas.Items {
			if vaPV(&va) == pv && va.Spec.NodeName == node && va.Status.Attached && va.DeletionTimestamp == nil {
				name = va.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("volume %s never attached to %s: %w", pv, short(node), err)
	}
	return name, nil
}

// waitMoved waits until pod runs (ready) on a node other than old, with a
// VolumeAttachment of pv attached there and none left on old; it returns
// that node and when this was first seen.
func (d *demo) waitMoved(ctx context.Context, ns, pod, pv, old string, timeout time.Duration) (string, time.Time, error) {
	var node, last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := d.env.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				last = fmt.Sprintf("pod %s: %v", pod, err)
			}
			return false, nil
		}
		node = p.Spec.NodeName
		if node == "" || node == old || !harness.PodReady(p) {
			last = fmt.Sprintf("pod %s on %s, phase %s, ready %v", pod, short(node), p.Status.Phase, harness.PodReady(p))
			return false, nil
		}
		vas, err := d.env.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		attached, onOld := false, false
		for _, va := range vas.Items {
			if vaPV(&va) != pv {
				continue
			}
			attached = attached || va.Spec.NodeName == node && va.Status.Attached
			onOld = onOld || va.Spec.NodeName == old
		}
		last = fmt.Sprintf("pod %s running on %s; volume attached there: %v; VolumeAttachment left on %s: %v", pod, short(node), attached, short(old), onOld)
		return attached && !onOld, nil
	})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%s did not move off %s with its volume within %s: last seen: %s", pod, short(old), timeout, last)
	}
	return node, time.Now(), nil
}

// printLifecycleCalls prints the lifecycle calls moto records for the
// instance, stamped with moto's own time, as they appear until ctx ends;
// calling the returned func prints the new ones at once.
func (d *demo) printLifecycleCalls(ctx context.Context, instance string) func() {
	var mu sync.Mutex
	seen := 0
	poll := func() {
		mu.Lock()
		defer mu.Unlock()
		calls, err := d.env.AWS.LifecycleCalls(ctx)
		if err != nil {
			return
		}
		for _, c := range calls[min(seen, len(calls)):] {
			if c.Params["InstanceId"] == instance {
				d.tl.at(c.Time, "moto: %s %s token=%s result=%s → %s", c.Operation, instance,
					c.Params["LifecycleActionToken"], c.Params["LifecycleActionResult"], c.Outcome)
			}
		}
		seen = len(calls)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
				poll()
			}
		}
	}()
	return poll
}

// instanceState is what EC2 (moto) reports for the instance.
func (d *demo) instanceState(ctx context.Context, id string) (string, error) {
	out, err := ec2.NewFromConfig(d.env.AWS.AWSConfig()).DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return "", fmt.Errorf("describing %s: %w", id, err)
	}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			return string(i.State.Name), nil
		}
	}
	return "", fmt.Errorf("describing %s: not found", id)
}

// newToken is a lifecycle action token shaped like Auto Scaling's.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
