package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// TestDrainSurvivesFaults: the function reaches the apiserver and the AWS
// emulator through proxies that fail a fifth of the requests (and the first AWS calls) (503, 429,
// dropped connections before and after forwarding, latency). The drain still
// ends with the lifecycle action completed once, the PDB never violated and
// the StatefulSet's volume moved.
func TestDrainSurvivesFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "faults", 3, harness.ASGSpec{})
	target := s.insts[0]
	var pv string
	s.onlyOn(ctx, target, func() { pv = s.webAndDB(ctx) })
	waitAttached(t, ctx, s.ns, "db-0", pv)

	faults := []fp.Fault{fp.ServerError, fp.Throttle, fp.Drop, fp.DropAfter, fp.Latency}
	serving, err := env.ServingTLS()
	if err != nil {
		t.Fatal(err)
	}
	api, err := fp.Start(fp.Options{Upstream: env.Server, Flavor: fp.Kubernetes, Rate: 0.2, Faults: faults, Seed: 1,
		ServeTLS: serving, UpstreamTLS: env.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Stop()
	// few AWS calls are made (describe, heartbeat, complete): fault the first
	// three of them for sure, a third of the rest
	aws, err := fp.Start(fp.Options{Upstream: env.AWS.URL(), Flavor: fp.AWSQuery, Rate: 0.34, Faults: faults, Seed: 2, FaultFirst: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer aws.Stop()

	floor := pdbFloor(ctx, s.ns, "app=web")
	rt := s.function(ctx, 2*time.Minute,
		"CLUSTER_ENDPOINT="+api.URL,
		"AWS_ENDPOINT_URL_EC2="+aws.URL,
		"AWS_ENDPOINT_URL_AUTO_SCALING="+aws.URL,
	)
	payload, err := env.StartTerminating(ctx, s.asg, target, "token-faults")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	out, err := harness.Invoke(ctx, rt, payload)
	took := time.Since(began)
	minReady := floor()
	if err != nil {
		t.Fatalf("invocation under faults: %v", err)
	}
	completed, _ := s.completions(ctx, target.ID)
	if len(completed) != 1 || completed[0].Params["LifecycleActionResult"] != "CONTINUE" {
		t.Errorf("want exactly one CONTINUE completion, got %+v (outcome %+v)", completed, out)
	}
	if out.Action != "drained" {
		t.Errorf("outcome %+v: want drained", out)
	}
	if minReady < 3 {
		t.Errorf("PDB violated under faults: %d web pods ready at one point", minReady)
	}
	if _, err := env.WaitPodVolumeAttached(ctx, s.ns, "db-0", pv, time.Minute); err != nil {
		t.Error(err)
	}

	// the table for the closing note
	var b strings.Builder
	fmt.Fprintf(&b, "\n| upstream | requests | 5xx | 429 | drop | drop-after | latency | outcome |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range []struct {
		name string
		px   *fp.Proxy
	}{{"kube-apiserver", api}, {"AWS (EC2, autoscaling)", aws}} {
		total, c := p.px.Counts()
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %s in %s, min web ready %d/4, completions %d |\n",
			p.name, total, c[fp.ServerError], c[fp.Throttle], c[fp.Drop], c[fp.DropAfter], c[fp.Latency],
			out.Action, took.Round(10*time.Millisecond), minReady, len(completed))
	}
	t.Log(b.String())
	var kinds []string
	_, c := api.Counts()
	for k := range c {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	if len(kinds) < 3 {
		t.Errorf("too few kinds of fault reached the apiserver path (%v): the test proves little", kinds)
	}
}

// TestTerminateWithEC2Unreachable: EC2 cannot be read at all. For an ASG
// listed in ASG_NAMES the node is still drained (found by providerID) and
// the hook completed, nothing forced; with no ASG list the function cannot
// tell whether the instance is ours, so it fails the invocation and touches
// nothing (Lambda retries; the hook's timeout is the backstop).
func TestTerminateWithEC2Unreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := newScene(t, ctx, "noec2", 2, harness.ASGSpec{})
	target := s.insts[0]
	s.onlyOn(ctx, target, func() {
		if _, err := env.Deployment(ctx, s.workload("web", 2), false); err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitPodsRunning(ctx, s.ns, "app=web", 2, time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	dead := "http://127.0.0.1:1" // nothing listens: every EC2 call fails
	before := getNode(t, ctx, target.PrivateDNSName)

	unlisted := s.function(ctx, 2*time.Minute, "AWS_ENDPOINT_URL_EC2="+dead)
	payload, err := env.StartTerminating(ctx, s.asg, target, "token-noec2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.Invoke(ctx, unlisted, payload); err == nil {
		t.Errorf("EC2 unreadable and no ASG list: want a failed invocation")
	}
	if ok, failed := s.completions(ctx, target.ID); len(ok)+len(failed) != 0 {
		t.Errorf("lifecycle calls made without knowing the instance is ours: %+v %+v", ok, failed)
	}
	if n := getNode(t, ctx, target.PrivateDNSName); n.Spec.Unschedulable != before.Spec.Unschedulable || len(n.Spec.Taints) != len(before.Spec.Taints) {
		t.Errorf("node changed: %+v", n.Spec)
	}

	listed := s.function(ctx, 2*time.Minute, "AWS_ENDPOINT_URL_EC2="+dead, "ASG_NAMES="+s.asg)
	out, err := harness.Invoke(ctx, listed, payload)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action != "drained" || out.LifecycleResult != "CONTINUE" || len(out.Evicted) != 2 {
		t.Errorf("outcome %+v: want drained, CONTINUE, 2 evicted", out)
	}
	if ok, _ := s.completions(ctx, target.ID); len(ok) != 1 {
		t.Errorf("want exactly one completion, got %+v", ok)
	}
	if n := getNode(t, ctx, target.PrivateDNSName); node.HasTaint(n, node.TaintOutOfService) {
		t.Errorf("out-of-service taint without EC2's evidence")
	}
}
