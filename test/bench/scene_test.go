package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
)

// seq keeps scene names unique in the harness (ASG, namespace, CSI volume
// handle), even with -count > 1.
var seq atomic.Int64

func sceneName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

// lifecycleToken is a fresh lifecycle action token, a UUID as Auto Scaling
// gives one (aws-node-termination-handler's SDK refuses a token shorter
// than 36 characters when it completes the action).
func lifecycleToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// scene is one run's slice of the cluster: an ASG whose instances have kwok
// nodes labelled pool=<name>, and a namespace of the same name.
type scene struct {
	name  string
	insts []harness.Instance
	pvs   []string
}

// eachInstance runs f for every instance at once and returns their errors.
func eachInstance(insts []harness.Instance, f func(i int, inst harness.Instance) error) error {
	return eachIndex(len(insts), func(i int) error { return f(i, insts[i]) })
}

// eachIndex runs f for 0..n-1 at once and returns their errors.
func eachIndex(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newScene builds a scene of nodes instances and nodes, fitted to d (nil:
// no drainer, the baseline).
func newScene(ctx context.Context, d drainer, name string, nodes int) (*scene, error) {
	insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: name, Size: nodes, Hooks: true})
	if err != nil {
		return nil, err
	}
	s := &scene{name: name, insts: insts}
	if err := eachInstance(insts, func(_ int, inst harness.Instance) error {
		return env.AddNodeFor(ctx, inst, map[string]string{"pool": name})
	}); err != nil {
		return s, err
	}
	if d != nil {
		if err := d.prepare(ctx, s); err != nil {
			return s, err
		}
	}
	return s, env.Namespace(ctx, name)
}

// workload is a workload of the scene's nodes whose pods are deleted at once
// (grace 0): the drains measure the drainer, not a shutdown that neither
// drainer can shorten (kwok would finish it at once, with one more write).
// Its pods are pinned to the scene's nodes by label and by name, so that the
// scheduler placing them (and their replacements, during a drain) looks at
// the scene's nodes only, not at each of a grown cluster's thousands: in a
// real cluster it runs on cores of its own, here on the drain's.
func (s *scene) workload(name string, replicas int32) harness.Workload {
	nodes := make([]string, 0, len(s.insts))
	for _, i := range s.insts {
		nodes = append(nodes, i.PrivateDNSName)
	}
	return harness.Workload{Namespace: s.name, Name: name, Replicas: replicas, NodeSelector: map[string]string{"pool": s.name}, Nodes: nodes, GracePeriod: new(int64)}
}

// statefulWorkload is a workload of the scene's nodes with the API's default
// grace period (30 s): the pod of a dead kubelet stays Terminating, with its
// volume attached, until it is force-deleted.
func (s *scene) statefulWorkload(name string) harness.Workload {
	w := s.workload(name, 1)
	w.GracePeriod = nil
	return w
}

// onlyOn runs build with every node of the scene but target cordoned, so the
// pods it creates land on target, then uncordons the others.
func (s *scene) onlyOn(ctx context.Context, target harness.Instance, build func() error) error {
	for _, i := range s.insts {
		if i.ID != target.ID {
			if err := env.SetUnschedulable(ctx, i.PrivateDNSName, true); err != nil {
				return err
			}
		}
	}
	if err := build(); err != nil {
		return err
	}
	for _, i := range s.insts {
		if i.ID != target.ID {
			if err := env.SetUnschedulable(ctx, i.PrivateDNSName, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// remove deletes what the scene put in the cluster, so later runs meet a
// cluster of the same size: its pods at once (grace 0, also those of a dead
// kubelet), its namespace, nodes, PVs and their VolumeAttachments. It
// returns once the namespace is gone (2 minutes at most): the namespace
// controller's and the garbage collector's work (hundreds of Events,
// ReplicaSets, pods' replacements) is then not done inside the next
// scene's measured time.
func (s *scene) remove(ctx context.Context) {
	removeNamespace(ctx, s.name, false)
	defer func() {
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().Namespaces().Get(ctx, s.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			progress("scene %s: namespace not gone after 2 minutes; going on", s.name)
		}
	}()
	for _, i := range s.insts {
		_ = env.Client.CoreV1().Nodes().Delete(ctx, i.PrivateDNSName, metav1.DeleteOptions{})
	}
	if len(s.pvs) > 0 {
		if vas, err := env.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
			for _, va := range vas.Items {
				for _, pv := range s.pvs {
					if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
						_ = env.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{})
					}
				}
			}
		}
		for _, pv := range s.pvs {
			_ = env.Client.CoreV1().PersistentVolumes().Delete(ctx, pv, metav1.DeleteOptions{})
		}
	}
}

// removeNamespace force-deletes a namespace's pods and the namespace; with
// wait it returns once the pods are gone.
func removeNamespace(ctx context.Context, ns string, waitGone bool) {
	zero := int64(0)
	pods := env.Client.CoreV1().Pods(ns)
	_ = pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	_ = env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if !waitGone {
		return
	}
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return apierrors.IsNotFound(err), nil
		}
		if len(l.Items) > 0 { // created meanwhile by a controller
			_ = pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		}
		return len(l.Items) == 0, nil
	})
}

// fn is a fresh function runtime (cold start) whose logs are kept in memory,
// to be shown when the run fails (and written to -function-logs).
type fn struct {
	rt  *lambdart.Runtime
	log *harness.LogBuffer
}

// fnSeq numbers the functions' log files.
var fnSeq atomic.Int64

func startFunction(ctx context.Context, extra ...string) (*fn, error) {
	log := &harness.LogBuffer{}
	rt, err := env.StartFunction(ctx, harness.FunctionOptions{Bootstrap: bootstrap, Timeout: 15 * time.Minute, Env: extra, Log: log})
	if err != nil {
		return nil, err
	}
	return &fn{rt: rt, log: log}, nil
}

func (f *fn) stop() {
	_ = f.rt.Stop()
	if *flagFunctionLogs != "" {
		name := filepath.Join(*flagFunctionLogs, fmt.Sprintf("function-%04d.log", fnSeq.Add(1)))
		if err := os.WriteFile(name, []byte(f.log.String()), 0o644); err != nil {
			progress("writing %s: %v", name, err)
		}
	}
}

// dump logs the function's output (its last lines) into the benchmark's log.
func (f *fn) dump(b *testing.B) {
	lines := strings.Split(strings.TrimSpace(f.log.String()), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	b.Logf("function log (last %d lines):\n%s", len(lines), strings.Join(lines, "\n"))
}

// peakRSSMiB reads the process's peak resident set size (VmHWM).
func peakRSSMiB(pid int) (float64, error) {
	if pid == 0 {
		return 0, fmt.Errorf("no function process")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "VmHWM:" {
			kb, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// waitMoved waits until the pod ns/name runs on another node than dead with
// its volume pv attached there, polling every interval, and returns when it
// did and where; ok is false when timeout passed first.
func waitMoved(ctx context.Context, ns, name, pv, dead string, interval, timeout time.Duration) (at time.Time, where string, ok bool) {
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		attached, n, _ := env.PodVolumeAttached(ctx, ns, name, pv)
		if attached && n != dead {
			where, at = n, time.Now()
			return true, nil
		}
		return false, nil
	})
	return at, where, err == nil
}

// dumpPods logs a namespace's pods and the VolumeAttachments of pv.
func dumpPods(b *testing.B, ctx context.Context, ns, pv string) {
	pods, _ := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		b.Logf("pod %s node=%s phase=%s deleting=%v", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
	}
	vas, _ := env.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	for _, va := range vas.Items {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
			b.Logf("va %s node=%s attached=%v deleting=%v", va.Name, va.Spec.NodeName, va.Status.Attached, va.DeletionTimestamp != nil)
		}
	}
}

// countRunning counts the Running, not deleting, pods of a namespace (from
// the apiserver's cache).
func countRunning(ctx context.Context, ns string) (int, error) {
	l, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n, nil
}
