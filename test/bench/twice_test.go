package bench

import (
	"context"
	"flag"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// flagStormEnv is more of the function's configuration for BenchmarkStorm's
// own storms (NAME=value, comma-separated): -storm-env BATCH_CORDON=true.
var flagStormEnv = flag.String("storm-env", "", "more of the function's configuration in BenchmarkStorm's storms (NAME=value,...), e.g. BATCH_CORDON=true")

// flagStormStagger delays the i-th delivery of BenchmarkStorm's storms by i
// times it: every instance is in Terminating:Wait from the start, their
// events come one after another (an instance refresh, a scale-in whose
// events trickle in), and a drain's replacements may land on a node whose
// own event has not come yet.
var flagStormStagger = flag.Duration("storm-stagger", 0, "BenchmarkStorm: the i-th event delivered i times this after the first (0: all at once)")

// stormDrainer is the drainer of BenchmarkStorm's storms: node-drainer with
// -storm-env.
func stormDrainer() ours {
	if *flagStormEnv == "" {
		return ours{}
	}
	return ours{env: strings.Split(*flagStormEnv, ",")}
}

// watchEvictedTwice counts the pods of namespace ns created from now on (the
// replacements of those the storm evicts) that were bound to one of nodes,
// the storm's targets: each was put on a node being drained and is evicted
// again by that node's drain (every target is drained empty). 0 is the
// goal: the replacements land on nodes that stay.
func watchEvictedTwice(ctx context.Context, ns string, nodes []string) (twice func() int, stop func(), err error) {
	since := time.Now().Truncate(time.Second) // creation times are in seconds
	targets := sets.New(nodes...)
	var mu sync.Mutex
	seen := sets.New[string]()
	stop, err = watchPods(ctx, ns, func(p *corev1.Pod, _ bool) {
		if p.CreationTimestamp.Time.Before(since) || !targets.Has(p.Spec.NodeName) {
			return
		}
		mu.Lock()
		seen.Insert(p.Name)
		mu.Unlock()
	})
	if err != nil {
		return nil, nil, err
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return seen.Len()
	}, stop, nil
}
