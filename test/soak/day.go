package soak

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/sim"
)

// Hooks of a day's group besides the template's.
const (
	extraHook = "drain-extra"        // ours, by HOOK_NAMES (Plan.ExtraOwnedHook)
	otherHook = "other-tool-drainer" // another tool's (Plan.OtherHook)
)

// day is one seed's day on the harness.
type day struct {
	env       *harness.Env
	bootstrap string
	seed      int64
	plan      sim.Plan
	name      string // of its namespace, group, cluster tag
	ctx       context.Context
	t0        time.Time
	cfg       config.Config // the function's configuration (scaled)
	funcEnv   []string

	insts map[int]harness.Instance // by the plan's node index
	rt    *lambdart.Runtime
	api   *fp.Proxy
	aws   *fp.Proxy
	obs   *observer

	mu         sync.Mutex
	trace      []string
	events     map[string]int
	faults     map[string]int
	checks     [numInv + 1]uint64
	violations []Violation
	draws      map[string]int
	actions    []*action
	ec2        map[string][]stamp // the states the soak gave each instance, in order
	kubelet    map[string][]stamp // node: "up"/"down"
	member     map[string]string  // instance: InService, Terminating, Pending, Gone
	group      map[string]string  // instance: its group, when not the day's (the skipped owner's)
	mine       map[int]bool       // indexes of moto's lifecycle calls the soak made itself
	seenCalls  int                // moto's lifecycle calls looked at so far
	seenAPI    int                // the apiserver proxy's requests looked at so far
	due        []dueCheck
	wg         sync.WaitGroup
}

// stamp is a state from a time on.
type stamp struct {
	at            time.Time
	state, reason string
}

// action is a lifecycle action the soak's Auto Scaling started.
type action struct {
	token, hook, id string
	group           string
	terminate, ours bool
	start           time.Time
	done, expired   bool
	doneAt          time.Time
	result          string
}

// dueCheck is a check to make once its time has come.
type dueCheck struct {
	at time.Time
	f  func()
}

func newDay(ctx context.Context, env *harness.Env, bootstrap string, seed int64) *day {
	return &day{env: env, bootstrap: bootstrap, seed: seed, plan: sim.NewPlan(seed), name: fmt.Sprintf("soak-%d", seed), ctx: ctx,
		insts: map[int]harness.Instance{}, events: map[string]int{}, faults: map[string]int{}, draws: map[string]int{},
		ec2: map[string][]stamp{}, kubelet: map[string][]stamp{}, member: map[string]string{}, group: map[string]string{}, mine: map[int]bool{}}
}

// since is the time since the day began.
func (d *day) since(t time.Time) time.Duration { return t.Sub(d.t0) }

func (d *day) tracef(format string, args ...any) {
	line := fmt.Sprintf("%7.1fs  ", time.Since(d.t0).Seconds()) + fmt.Sprintf(format, args...)
	d.mu.Lock()
	d.trace = append(d.trace, line)
	d.mu.Unlock()
	if Live != nil {
		fmt.Fprintf(Live, "seed %d %s\n", d.seed, line)
	}
}

// OnViolation, when set, is called at each violation (SOAK_FIRST stops
// the soak at the first).
var OnViolation func()

// Live, when set, receives every day's trace as it happens.
var Live io.Writer

// roll draws from the seed for key (its n-th draw for that key).
func (d *day) roll(key string) float64 {
	d.mu.Lock()
	n := d.draws[key]
	d.draws[key]++
	d.mu.Unlock()
	return sim.Draw(d.seed, fmt.Sprintf("soak/%s/%d", key, n))
}

func (d *day) count(m map[string]int, k string) {
	d.mu.Lock()
	m[k]++
	d.mu.Unlock()
}

func (d *day) check(i int) {
	d.mu.Lock()
	d.checks[i]++
	d.mu.Unlock()
}

func (d *day) violate(i int, format string, args ...any) {
	v := Violation{Inv: i, At: time.Since(d.t0), When: time.Now(), What: fmt.Sprintf(format, args...)}
	d.mu.Lock()
	d.violations = append(d.violations, v)
	d.mu.Unlock()
	d.tracef("VIOLATION %s", v)
	if OnViolation != nil {
		OnViolation()
	}
}

// after runs f after d on the day's clock (its own goroutine) unless the
// day has ended by then.
func (d *day) after(wait time.Duration, f func()) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		select {
		case <-time.After(wait):
			f()
		case <-d.ctx.Done():
		}
	}()
}

// functionEnv is the plan's configuration on the soak's clock: its
// timeouts divided by Compress where the configuration allows it.
func (d *day) functionEnv() ([]string, error) {
	env := map[string]string{}
	for k, v := range d.plan.Env {
		switch k {
		case "CLUSTER_NAME", "AWS_LAMBDA_FUNCTION_NAME":
			continue // the harness's own
		case "POD_POLICY", "GROUP_POLICY_TAGS", "LB_DRAIN_WAIT", "BATCH_CORDON", "NODE_CONDITIONS", "REBALANCE_ACTION":
			continue // the simulation's policies (issue 55, test/sim/policy.go): the soak's days stay as they were
		case "DRAIN_TIMEOUT", "STOPPING_WAIT_TIMEOUT", "VOLUME_DETACH_TIMEOUT":
			if dur, err := time.ParseDuration(v); err == nil {
				v = max(scaled(dur), 5*time.Second).String()
			}
		}
		env[k] = v
	}
	env["ADVISORY_MARK_TTL"] = advisoryMarkTTL
	env["CLUSTER_TAG_KEY"] = "kubernetes.io/cluster/" + d.name
	env["ASG_NAMES"] = d.name + "," + d.skippedGroup()
	env["CLUSTER_NAME"] = harness.ClusterName
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		return nil, fmt.Errorf("the plan's configuration on the soak's clock: %w", err)
	}
	d.cfg = cfg
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out, nil
}

// lambdaTimeout is the plan's function timeout on the soak's clock, at
// least a minute (DEADLINE_MARGIN keeps 20 s of it back).
func (d *day) lambdaTimeout() time.Duration { return max(scaled(d.plan.LambdaTimeout), time.Minute) }

// setUp builds the day's scene: its group (the plan's hooks), a kwok node
// per instance, the workloads under their PDBs, the proxies and the
// function.
func (d *day) setUp() error {
	ctx := d.ctx
	env, err := d.functionEnv()
	if err != nil {
		return err
	}
	insts, err := d.env.CreateASG(ctx, harness.ASGSpec{Name: d.name, Size: d.plan.Nodes, Hooks: true,
		ClusterTag: "kubernetes.io/cluster/" + d.name, Hibernation: true})
	if err != nil {
		return err
	}
	if err := d.hooks(ctx); err != nil {
		return err
	}
	d.t0 = time.Now()
	for i, in := range insts {
		d.insts[i] = in
		if err := d.env.AddNodeFor(ctx, in, map[string]string{"pool": d.name}); err != nil {
			return err
		}
		d.setEC2(in.ID, "running", "")
		d.setKubelet(in.PrivateDNSName, true)
		d.member[in.ID] = "InService"
	}
	if err := d.skipped(ctx); err != nil {
		return err
	}
	if err := d.workloads(ctx); err != nil {
		return err
	}
	if d.obs, err = d.observe(); err != nil {
		return err
	}
	return d.startFunction(env)
}

// skippedGroup is the group of the skipped owner's node (Plan.SkippedGroup).
func (d *day) skippedGroup() string { return d.name + "-owned" }

// skipped adds, for Plan.SkippedGroup, one more instance in a group of its
// own whose node a skipped owner (Plan.SkippedOwner) manages: its index is
// Plan.Nodes.
func (d *day) skipped(ctx context.Context) error {
	if !d.plan.SkippedGroup {
		return nil
	}
	insts, err := d.env.CreateASG(ctx, harness.ASGSpec{Name: d.skippedGroup(), Size: 1, Hooks: true,
		ClusterTag: "kubernetes.io/cluster/" + d.name, Hibernation: true})
	if err != nil {
		return err
	}
	labels := map[string]string{"pool": d.name, node.LabelEKSNodeGroup: d.skippedGroup()}
	if d.plan.SkippedOwner == "karpenter" {
		labels = map[string]string{"pool": d.name, node.LabelKarpenterNodePool: "default"}
	}
	in := insts[0]
	if err := d.env.AddNodeFor(ctx, in, labels); err != nil {
		return err
	}
	d.mu.Lock()
	d.insts[d.plan.Nodes] = in
	d.group[in.ID] = d.skippedGroup()
	d.mu.Unlock()
	d.setEC2(in.ID, "running", "")
	d.setKubelet(in.PrivateDNSName, true)
	d.member[in.ID] = "InService"
	return nil
}

// inst is the instance of the plan's node i.
func (d *day) inst(i int) (harness.Instance, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	in, ok := d.insts[i]
	return in, ok
}

// instances are the day's instances (launched ones too).
func (d *day) instances() []harness.Instance {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]harness.Instance, 0, len(d.insts))
	for _, in := range d.insts {
		out = append(out, in)
	}
	return out
}

// groupOf is the group of an instance.
func (d *day) groupOf(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if g, ok := d.group[id]; ok {
		return g
	}
	return d.name
}

// hooks sets the group's hooks as the plan has them: the template's
// terminate hook with its heartbeat timeout and default result, ours named
// by HOOK_NAMES, another tool's.
func (d *day) hooks(ctx context.Context) error {
	asc := autoscaling.NewFromConfig(d.env.AWS.AWSConfig())
	put := func(name string) error {
		_, err := asc.PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
			AutoScalingGroupName: aws.String(d.name), LifecycleHookName: aws.String(name),
			LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"),
			HeartbeatTimeout:    aws.Int32(d.plan.HeartbeatSecs), DefaultResult: aws.String(d.plan.DefaultResult),
		})
		return err
	}
	names := []string{harness.TerminateHook}
	if d.plan.ExtraOwnedHook {
		names = append(names, extraHook)
	}
	if d.plan.OtherHook {
		names = append(names, otherHook)
	}
	for _, n := range names {
		if err := put(n); err != nil {
			return fmt.Errorf("hook %s: %w", n, err)
		}
	}
	return nil
}

// terminateHooks are the terminate hooks of the group of id.
func (d *day) terminateHooks(id string) []string {
	names := []string{harness.TerminateHook}
	if d.groupOf(id) != d.name {
		return names // the template's
	}
	if d.plan.ExtraOwnedHook {
		names = append(names, extraHook)
	}
	if d.plan.OtherHook {
		names = append(names, otherHook)
	}
	return names
}

// ours says whether the function may complete or heartbeat hook.
func (d *day) ours(hook string) bool {
	return hook == harness.TerminateHook || hook == harness.LaunchHook || (d.plan.ExtraOwnedHook && hook == extraHook)
}

// podGrace is the soak's pods' grace period: the API's default, 30 s, on
// the soak's clock. kwok ends a pod at a random moment within it, as the
// simulation's kubelets do (kube.kubeletEnds): a drain waits on pods that
// take their time to stop, not on a kwok that ends them at once.
var podGrace = int64(30 / Compress)

// workloads: web (Plan.Web replicas, PDB maxUnavailable 1), the plan's
// single-replica databases with RWO volumes (PDB minAvailable 1 each), an
// unmanaged pod, a DaemonSet; their pods stop within podGrace.
func (d *day) workloads(ctx context.Context) error {
	if err := d.env.Namespace(ctx, d.name); err != nil {
		return err
	}
	w := func(name string, n int32) harness.Workload {
		return harness.Workload{Namespace: d.name, Name: name, Replicas: n, NodeSelector: map[string]string{"pool": d.name},
			GracePeriod: &podGrace, StopWithinGrace: true}
	}
	web := w("web", int32(d.plan.Web))
	if _, err := d.env.Deployment(ctx, web, false); err != nil {
		return err
	}
	if _, err := d.env.PDB(ctx, web, 1, 0); err != nil {
		return err
	}
	for i := range d.plan.DBs {
		db := w(fmt.Sprintf("db%d", i), 1)
		if _, err := d.env.StatefulSet(ctx, db, harness.Zone); err != nil {
			return err
		}
		if _, err := d.env.PDB(ctx, db, -1, 1); err != nil {
			return err
		}
	}
	if _, err := d.env.DaemonSet(ctx, w("agent", 0)); err != nil {
		return err
	}
	if d.plan.Unmanaged {
		if _, err := d.env.BarePod(ctx, w("solo", 0), d.insts[0].PrivateDNSName); err != nil {
			return err
		}
	}
	want := d.plan.Web + d.plan.DBs + d.plan.Nodes // a DaemonSet pod on each node
	if d.plan.Unmanaged {
		want++
	}
	if d.plan.SkippedGroup {
		want++
	}
	_, err := d.env.WaitPodsRunning(ctx, d.name, "", want, 3*time.Minute)
	return err
}

// startFunction starts the proxies (the plan's API faults and outages; AWS
// throttles at the same rate) and the function behind them.
func (d *day) startFunction(env []string) error {
	serving, err := d.env.ServingTLS()
	if err != nil {
		return err
	}
	seed := uint64(d.seed)
	d.api, err = fp.Start(fp.Options{Upstream: d.env.Server, Flavor: fp.Kubernetes, ServeTLS: serving, UpstreamTLS: d.env.ClientTLS(),
		Record: true, Rate: d.plan.APIFault, Seed: seed,
		Faults: []fp.Fault{fp.ServerError, fp.Throttle, fp.Drop, fp.Latency, fp.DropAfter}})
	if err != nil {
		return err
	}
	d.aws, err = fp.Start(fp.Options{Upstream: d.env.AWS.URL(), Flavor: fp.AWSQuery, Record: true, Rate: d.plan.APIFault / 2, Seed: seed + 1,
		Faults: []fp.Fault{fp.Throttle, fp.Throttle, fp.ServerError, fp.Latency}})
	if err != nil {
		return err
	}
	env = append(env, "CLUSTER_ENDPOINT="+d.api.URL, "AWS_ENDPOINT_URL_EC2="+d.aws.URL, "AWS_ENDPOINT_URL_AUTO_SCALING="+d.aws.URL)
	d.funcEnv = env
	d.rt, err = d.env.StartFunction(d.ctx, harness.FunctionOptions{Bootstrap: d.bootstrap, Timeout: d.lambdaTimeout(), Env: env,
		Log: io.Discard, AsyncRetries: lambdart.DefaultAsyncRetries})
	return err
}

// tearDown stops the function and the proxies and removes the day's nodes
// and namespace (kwok plays no more of them).
func (d *day) tearDown() {
	if d.rt != nil {
		_ = d.rt.Stop()
	}
	if d.obs != nil {
		d.obs.close()
	}
	for _, p := range []*fp.Proxy{d.api, d.aws} {
		if p != nil {
			_ = p.Stop()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = d.env.Client.CoreV1().Namespaces().Delete(ctx, d.name, metav1.DeleteOptions{})
	for _, in := range d.instances() {
		_ = d.env.Client.CoreV1().Nodes().Delete(ctx, in.PrivateDNSName, metav1.DeleteOptions{})
	}
}

// Trace is the day's trace.
func (d *day) Trace() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.trace...)
}

func (d *day) result(err error) *Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := &Result{Seed: d.seed, Plan: d.plan, Checks: d.checks, Violations: d.violations, Events: d.events, Faults: d.faults,
		Trace: append([]string(nil), d.trace...), Err: err}
	if !d.t0.IsZero() {
		r.Minutes = time.Since(d.t0).Minutes()
	}
	return r
}

// planLine is the plan in one line, for the day's report.
func (d *day) planLine() string { return strings.ReplaceAll(d.plan.String(), "\n", " |") }
