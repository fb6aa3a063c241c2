package handler

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
)

// TestSweepInShards: a cluster with more Nodes than SWEEP_SHARD_NODES is
// swept in shards. The scheduled invocation reads every Node page by page,
// acts on its own, and invokes one shard per further SWEEP_SHARD_NODES with
// the continue token where it starts; each shard reads only its pages and
// acts only on its nodes (the dead node of the third page is the third
// shard's to release), and every summary names the one pass. A shard
// delivered too late reads nothing.
func TestSweepInShards(t *testing.T) {
	var objs []runtime.Object
	id := func(i int) string { return fmt.Sprintf("i-%06x%011x", i, i) } // nodeName uses id[2:8]
	for i := range 600 {
		objs = append(objs, newNode(id(i)))
	}
	dead := id(550)
	objs = append(objs, pod(dead, "apps", "web-1"))
	e := newEnv(objs...)
	e.cfg.SweepShardNodes = 250
	e.ec2.readings[dead] = []reading{{state: instance.StateStopped, tagged: true}}
	lists := clustertest.Paginate(e.kube, corev1.SchemeGroupVersion.WithResource("nodes"), nil)

	out, err := e.handle(t, sweepEvent(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := out.Sweep
	if s == nil || s.Shard != 0 || s.Shards != 3 || s.Nodes != 250 || s.NodesElsewhere != 350 || s.Pass == "" {
		t.Fatalf("scheduled invocation's summary %+v: want shard 0 of 3, 250 nodes its own, 350 elsewhere", s)
	}
	if len(s.Dead) != 0 || !e.podExists("apps", "web-1") {
		t.Fatalf("shard 0 released %v: the dead node is the third shard's", s.Dead)
	}
	if n := len(lists.All()); n != 3 {
		t.Errorf("shard 0 made %d node lists, want 3 pages", n)
	}
	if len(e.lam.invoked) != 2 {
		t.Fatalf("%d invocations, want 2 shards", len(e.lam.invoked))
	}
	var shards [][]byte
	for i, in := range e.lam.invoked {
		ev, cont, err := event.ParseInvocation(in.Payload)
		if err != nil || cont != nil || ev.Kind != event.KindSweep || ev.Shard == nil {
			t.Fatalf("invocation %d: %v %v %+v: want a sweep shard", i, err, cont, ev)
		}
		if sh := ev.Shard; sh.Index != i+1 || sh.Of != 3 || sh.Pass != s.Pass || sh.Continue == "" {
			t.Errorf("shard payload %+v: want index %d of 3 of pass %s with a continue token", sh, i+1, s.Pass)
		}
		shards = append(shards, in.Payload)
	}
	for i, want := range []struct {
		nodes int
		dead  []string
	}{{250, nil}, {100, []string{dead}}} {
		before := len(lists.All())
		out, err := e.handle(t, shards[i], 10*time.Second)
		if err != nil {
			t.Fatalf("shard %d: %v", i+1, err)
		}
		s := out.Sweep
		if s == nil || s.Shard != i+1 || s.Shards != 3 || s.Nodes != want.nodes || !slices.Equal(s.Dead, want.dead) || s.Pass != out.Sweep.Pass {
			t.Fatalf("shard %d: summary %+v: want %d nodes, dead %v", i+1, s, want.nodes, want.dead)
		}
		if n := len(lists.All()) - before; n != 1 {
			t.Errorf("shard %d made %d node lists, want its one page", i+1, n)
		}
	}
	if e.podExists("apps", "web-1") {
		t.Error("the third shard did not release the dead node's pod")
	}
	if len(e.lam.invoked) != 2 {
		t.Errorf("the shards invoked more shards: %d invocations", len(e.lam.invoked))
	}

	// a shard delivered past ShardMaxAge reads nothing and does nothing
	var late map[string]event.SweepShard
	if err := json.Unmarshal(shards[0], &late); err != nil {
		t.Fatal(err)
	}
	sh := late["nodeDrainerSweepShard"]
	sh.StartedAt = e.now.Add(-event.ShardMaxAge - time.Minute)
	payload, err := sh.Payload()
	if err != nil {
		t.Fatal(err)
	}
	before := len(e.kube.Actions())
	out, err = e.handle(t, payload, 10*time.Second)
	if err != nil || out.Action != ActionIgnored || len(e.kube.Actions()) != before {
		t.Errorf("late shard: %+v, %v, %d cluster calls: want ignored, nothing read", out, err, len(e.kube.Actions())-before)
	}
}
