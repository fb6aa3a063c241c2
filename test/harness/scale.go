package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The cluster at scale: thousands of nodes and a hundred thousand pods that
// only make the cluster big (the function's reads meet them), next to the
// scenes' own nodes, which the first kwok plays as before.
//
// A second kwok process plays the scale nodes (annotated
// KwokAnnotation=ScaleKwokValue), so their Leases can be renewed less often
// than the scenes' (whose staleness the tests time): every LeaseSeconds/4,
// inside the controller-manager's --node-monitor-grace-period
// (Options.NodeMonitorGrace), which keeps them Ready. Their status
// heartbeat is kwok's with-lease stage: every 10 to 20 minutes. It plays
// the nodes only: the scale pods are bound and stay Pending (no status
// written), unless PlayPods, when it makes them Running as kwok does the
// scenes' (a second write per pod, which this 2-core machine pays for
// dearly at 100,000 pods).
//
// A scale node's providerID is not an EC2 one (kwok://<name>): no instance
// stands behind it in the emulator, whose DescribeInstances scans every
// instance it holds in Python, so the sweep and the guard leave it alone even
// when a heartbeat comes late and it turns NotReady for a moment; a node of
// a real cluster with an EC2 providerID is read the same (one object among
// thousands in the same lists), only EC2 is asked about it when it looks
// wrong.
const (
	ScaleKwokValue = "scale"
	// ScaleQPS is the rate of the client that builds the scale: creations
	// in parallel, as many as the apiserver takes.
	ScaleQPS = 2000
)

// ScaleOptions configure StartScaleKwok.
type ScaleOptions struct {
	// LeaseSeconds is the scale nodes' Lease duration; kwok renews them
	// every quarter of it, which must stay inside NodeMonitorGrace.
	LeaseSeconds int
	// PlayPods makes the scale pods Running (kwok's pod stages).
	PlayPods bool
}

// StartScaleKwok starts the kwok that plays the scale nodes (once; later
// calls do nothing).
func (e *Env) StartScaleKwok(ctx context.Context, o ScaleOptions) error {
	e.mu.Lock()
	started := e.scaleKwok
	e.scaleKwok = true
	e.mu.Unlock()
	if started {
		return nil
	}
	if o.LeaseSeconds <= 0 {
		o.LeaseSeconds = 72
	}
	if renew := time.Duration(o.LeaseSeconds) * time.Second / 4; renew >= e.nodeMonitorGrace {
		return fmt.Errorf("scale nodes' Leases renewed every %s, not inside the controller-manager's %s grace period: they would turn NotReady", renew, e.nodeMonitorGrace)
	}
	return e.runKwok(ctx, "kwok-scale", ScaleKwokValue, o.LeaseSeconds, o.PlayPods)
}

// scaleClient is an admin client with a rate limit for building the scale.
func (e *Env) scaleClient() (kubernetes.Interface, error) {
	c := rest.CopyConfig(e.Admin)
	c.QPS, c.Burst = ScaleQPS, 2*ScaleQPS
	return kubernetes.NewForConfig(c)
}

// ScaleNodeName names the i-th scale node.
func ScaleNodeName(i int) string { return fmt.Sprintf("scale-node-%05d", i) }

// AddScaleNodes registers scale nodes from..to-1 (ScaleNodeName), parallel
// creations at a time, played by the scale kwok (StartScaleKwok); it does
// not wait for them to turn Ready (WaitScaleReady).
func (e *Env) AddScaleNodes(ctx context.Context, from, to, parallel int) error {
	c, err := e.scaleClient()
	if err != nil {
		return err
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return parallelDo(ctx, from, to, parallel, func(i int) error {
		name := ScaleNodeName(i)
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				Labels: map[string]string{
					corev1.LabelHostname:           name,
					corev1.LabelTopologyZone:       Zone,
					corev1.LabelTopologyRegion:     "us-east-1",
					corev1.LabelInstanceTypeStable: "m5.4xlarge",
					corev1.LabelOSStable:           "linux",
					corev1.LabelArchStable:         "amd64",
					"type":                         "kwok",
					"pool":                         "scale",
					"eks.amazonaws.com/nodegroup":  fmt.Sprintf("scale-%02d", i%20),
				},
				Annotations: map[string]string{
					KwokAnnotation: ScaleKwokValue,
					"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				},
			},
			Spec:   corev1.NodeSpec{ProviderID: "kwok://" + name},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Phase: corev1.NodeRunning},
		}
		return create(ctx, "node "+name, func() error {
			_, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			return err
		})
	})
}

// ScaleNamespaces are the namespaces the scale pods are spread over.
const ScaleNamespaces = 20

// ScaleNamespace names the i-th scale namespace.
func ScaleNamespace(i int) string { return fmt.Sprintf("scale-%02d", i%ScaleNamespaces) }

// AddScalePods creates pods from..to-1, each bound straight to a scale node
// (spec.nodeName set: no scheduler), pod j on node j mod nodes, in
// ScaleNamespaces namespaces, parallel creations at a time. Each looks like
// a Deployment's pod of a small web service (labels, requests, a probe, a
// few variables): the size of the objects is what the reads pay for.
func (e *Env) AddScalePods(ctx context.Context, from, to, nodes, parallel int) error {
	c, err := e.scaleClient()
	if err != nil {
		return err
	}
	for i := range ScaleNamespaces {
		if from > 0 {
			break // made with the first pods
		}
		if err := e.Namespace(ctx, ScaleNamespace(i)); err != nil {
			return err
		}
	}
	zero := int64(0)
	return parallelDo(ctx, from, to, parallel, func(j int) error {
		ns := ScaleNamespace(j)
		app := fmt.Sprintf("svc-%03d", j%500)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns,
				Name:      fmt.Sprintf("%s-%07d", app, j),
				Labels: map[string]string{
					"app.kubernetes.io/name":    app,
					"app.kubernetes.io/part-of": "scale",
					"pod-template-hash":         "5d8f7c9b4",
				},
			},
			Spec: corev1.PodSpec{
				NodeName: ScaleNodeName(j % nodes),
				// a scale node late with a heartbeat is not a reason to lose
				// the pods that make the cluster big
				Tolerations: []corev1.Toleration{
					{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
					{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				},
				TerminationGracePeriodSeconds: &zero,
				Containers: []corev1.Container{{
					Name:  "app",
					Image: "registry.invalid/team/" + app + ":1.4.2",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Env: []corev1.EnvVar{
						{Name: "LOG_LEVEL", Value: "info"},
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
					},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
				}},
			},
		}
		return create(ctx, "pod "+ns+"/"+p.Name, func() error {
			_, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			return err
		})
	})
}

// WaitScaleReady waits until want scale nodes are Ready and want pods of the
// scale namespaces exist (Running, with running) (paginated lists of the
// admin client), reporting progress; it returns what it counted last.
func (e *Env) WaitScaleReady(ctx context.Context, wantNodes, wantPods int, running bool, timeout time.Duration, progress func(nodes, pods int)) (int, int, error) {
	deadline := time.Now().Add(timeout)
	nodes, pods := 0, 0
	for {
		var err error
		// the pods are counted once the nodes are there (a full paginated
		// list of 100,000 pods is not free)
		if nodes, err = e.countScale(ctx, true, false); err == nil && nodes >= wantNodes {
			pods, err = e.countScale(ctx, false, running)
		}
		if err == nil && nodes >= wantNodes && pods >= wantPods {
			return nodes, pods, nil
		}
		if progress != nil {
			progress(nodes, pods)
		}
		if time.Now().After(deadline) {
			return nodes, pods, fmt.Errorf("after %s: %d of %d scale nodes Ready, %d of %d scale pods there (%v)", timeout, nodes, wantNodes, pods, wantPods, err)
		}
		select {
		case <-ctx.Done():
			return nodes, pods, ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}

// countScale counts the Ready scale nodes (or the scale pods, the Running
// ones with running).
func (e *Env) countScale(ctx context.Context, nodes, running bool) (int, error) {
	n, cont := 0, ""
	for {
		o := metav1.ListOptions{Limit: 2000, Continue: cont}
		if nodes {
			o.LabelSelector = "pool=scale"
			l, err := e.Client.CoreV1().Nodes().List(ctx, o)
			if err != nil {
				return n, err
			}
			for i := range l.Items {
				for _, c := range l.Items[i].Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						n++
					}
				}
			}
			cont = l.Continue
		} else {
			o.LabelSelector = "app.kubernetes.io/part-of=scale"
			if running {
				o.FieldSelector = "status.phase=Running"
			}
			l, err := e.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			if err != nil {
				return n, err
			}
			n += len(l.Items)
			cont = l.Continue
		}
		if cont == "" {
			return n, nil
		}
	}
}

// create sends a creation, again after an answer that says the apiserver
// was too busy (a timeout, 429, 5xx: up to 5 attempts); an object that
// exists already was created by an attempt whose answer was lost.
func create(ctx context.Context, what string, f func() error) error {
	var err error
	for attempt := range 5 {
		err = f()
		switch {
		case err == nil, attempt > 0 && apierrors.IsAlreadyExists(err):
			return nil
		case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
			apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt+1) * time.Second):
			}
		default:
			return fmt.Errorf("creating %s: %w", what, err)
		}
	}
	return fmt.Errorf("creating %s: 5 attempts: %w", what, err)
}

// parallelDo runs f for from..to-1, parallel at a time; the first error
// stops the rest.
func parallelDo(ctx context.Context, from, to, parallel int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next.Store(int64(from))
	for range parallel {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// ProcessRSS is a harness component's resident memory now and at its peak
// (VmRSS, VmHWM), in MiB: "etcd", "kube-apiserver", "kwok", "kwok-scale", ...
func (e *Env) ProcessRSS(name string) (now, peak float64, err error) {
	pid, err := e.pid(name)
	if err != nil {
		return 0, 0, err
	}
	return ProcRSS(pid)
}

// ProcessCPU is a harness component's CPU time so far, user and system
// (/proc/<pid>/stat): the difference of two readings is what it spent
// between them, e.g. the control plane's share of a drain on this machine.
func (e *Env) ProcessCPU(name string) (time.Duration, error) {
	pid, err := e.pid(name)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// the fields after the command's name (which may hold spaces, in
	// parentheses): state is the first, utime the 12th, stime the 13th
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		t, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is the unit of /proc/<pid>/stat's times (USER_HZ), 100 on
// Linux whatever the kernel's own tick.
const clockTicks = 100

// pid is a harness component's process id.
func (e *Env) pid(name string) (int, error) {
	p := e.process(name)
	if p == nil || p.cmd.Process == nil {
		return 0, fmt.Errorf("no %s process", name)
	}
	return p.cmd.Process.Pid, nil
}

// ProcRSS reads a process's VmRSS and VmHWM from /proc, in MiB.
func ProcRSS(pid int) (now, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || (fields[0] != "VmRSS:" && fields[0] != "VmHWM:") {
			continue
		}
		kb, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			return 0, 0, err
		}
		if fields[0] == "VmRSS:" {
			now = kb / 1024
		} else {
			peak = kb / 1024
		}
		found++
	}
	if found < 2 {
		return now, peak, errors.New("no VmRSS and VmHWM in /proc/" + strconv.Itoa(pid) + "/status")
	}
	return now, peak, sc.Err()
}
