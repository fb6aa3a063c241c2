package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// A drainer is what handles a scene's EventBridge events: node-drainer (a
// fresh function process per event under the Lambda runtime emulator) or
// the peer, aws-node-termination-handler in queue mode (one long-running
// process reading its SQS queue). The scenes are the same code for both;
// only the delivery of the event and the metric names differ.
type drainer interface {
	// metric names one of this drainer's metrics: ours as named, the
	// peer's with its prefix (nth_, nth_tuned_).
	metric(name string) string
	// apiKey is the apiCounts key of this drainer's own apiserver requests
	// (its FlowSchema's dispatched count).
	apiKey() string
	// prepare fits a new scene's instances to the drainer before any event.
	prepare(ctx context.Context, s *scene) error
	// start readies the handling of n events (ours: n fresh functions, a
	// cold start each, before the clock starts).
	start(ctx context.Context, n int) (handle, error)
	// settle is how long after its delivery an event's hook may still be
	// completed: 0 for ours (the invoke returns after the completion), the
	// peer's drain time for the peer (it answers nothing).
	settle() time.Duration
}

// handle delivers the events of one scene.
type handle interface {
	// deliver hands event i over. Ours invokes function i and returns its
	// answer; the peer's puts the event on its queue and returns.
	deliver(ctx context.Context, i int, event []byte) (delivered, error)
	stop()
	// dump logs what explains a failure of event i (the function's log, the
	// peer's log).
	dump(b *testing.B, i int)
}

// delivered is what a delivery tells: for ours the invoke round trip, the
// outcome and the process's peak RSS; nothing for the peer.
type delivered struct {
	invoke time.Duration
	out    *handler.Outcome
	rssMiB float64
	// cpu is what the harness's components spent from the event sent to
	// the hook completed (set by terminate)
	cpu cpuSpent
	// api is the apiserver's counters over the same time, its garbage
	// collector's among them (nil when its /metrics could not be read;
	// set by terminate)
	api apiCounts
}

// ours is node-drainer.
type ours struct {
	// env is more of the function's configuration (NAME=value), and
	// suffix what its metrics' names end with (outcomesOn)
	env    []string
	suffix string
}

// metric is name with o's suffix before its unit: drain_110_pods_s becomes
// drain_110_pods_outcomes_on_s.
func (o ours) metric(name string) string {
	if base, ok := strings.CutSuffix(name, "_s"); ok && o.suffix != "" {
		return base + o.suffix + "_s"
	}
	return name + o.suffix
}

func (ours) apiKey() string                        { return fnKey }
func (ours) prepare(context.Context, *scene) error { return nil }
func (ours) settle() time.Duration                 { return 0 }
func (o ours) start(ctx context.Context, n int) (handle, error) {
	h := &functions{}
	for range n {
		f, err := startFunction(ctx, o.env...)
		if err != nil {
			h.stop()
			return nil, err
		}
		h.fns = append(h.fns, f)
	}
	return h, nil
}

type functions struct{ fns []*fn }

func (h *functions) deliver(ctx context.Context, i int, event []byte) (delivered, error) {
	f := h.fns[i]
	begin := time.Now()
	out, err := harness.Invoke(ctx, f.rt, event)
	d := delivered{invoke: time.Since(begin)}
	if err != nil {
		return d, fmt.Errorf("invoking: %w", err)
	}
	d.out = &out
	rss, err := peakRSSMiB(f.rt.PID())
	if err != nil {
		return d, fmt.Errorf("reading the function's peak RSS: %w", err)
	}
	d.rssMiB = rss
	return d, nil
}

func (h *functions) stop() {
	for _, f := range h.fns {
		f.stop()
	}
}

func (h *functions) dump(b *testing.B, i int) { h.fns[i].dump(b) }

// nth is aws-node-termination-handler, one process per configuration for
// the package (its queue, its settings), started on first use.
type nth struct {
	prefix string
	name   string   // its queue and log name
	env    []string // its settings beyond the shipped defaults
	wait   time.Duration
}

var (
	peersMu sync.Mutex
	peers   = map[string]*harness.NTH{}
	retired = map[string]int{} // how often each configuration was retired
	nthBin  string
)

// peer returns the running NTH of this configuration, starting it (and
// building it, first time only) when needed. A peer that cannot be built or
// started fails the benchmark with the reason.
func (d nth) peer(ctx context.Context) (*harness.NTH, error) {
	peersMu.Lock()
	defer peersMu.Unlock()
	if p := peers[d.name]; p != nil {
		if err := p.Running(); err != nil {
			return nil, err
		}
		return p, nil
	}
	if nthBin == "" {
		began := time.Now()
		bin, err := harness.NTHBinary(ctx)
		if err != nil {
			return nil, err
		}
		progress("aws-node-termination-handler: %s (ready in %s)", bin, time.Since(began).Round(time.Second))
		nthBin = bin
	}
	name := d.name
	if r := retired[d.name]; r > 0 {
		name = fmt.Sprintf("%s-%d", d.name, r+1)
	}
	p, err := env.StartNTH(ctx, harness.NTHOptions{Binary: nthBin, Name: name, Env: d.env})
	if err != nil {
		return nil, err
	}
	progress("aws-node-termination-handler %s started in queue mode, queue %s, settings %s", name, p.QueueURL, settings(d.env))
	peers[d.name] = p
	return p, nil
}

// retire stops this configuration's NTH, as the reclaim of its spot
// instances at the notice ends the drains it has not finished: they would
// otherwise go on through the next scene, and its requests and evictions
// would be counted against whoever is measured then. The next use starts a
// fresh process on a fresh queue.
func (d nth) retire() {
	peersMu.Lock()
	defer peersMu.Unlock()
	if p := peers[d.name]; p != nil {
		p.Stop()
		delete(peers, d.name)
		retired[d.name]++
	}
}

func settings(env []string) string {
	if len(env) == 0 {
		return "shipped defaults"
	}
	return strings.Join(env, " ")
}

func (d nth) metric(name string) string { return d.prefix + name }
func (d nth) apiKey() string            { return peerKey }
func (d nth) settle() time.Duration     { return d.wait }

// prepare tags the scene's instances as NTH's queue mode wants them before
// it drains (CHECK_TAG_BEFORE_DRAINING stays at its default, on).
func (d nth) prepare(ctx context.Context, s *scene) error {
	ids := make([]string, len(s.insts))
	for i, inst := range s.insts {
		ids[i] = inst.ID
	}
	return env.TagManaged(ctx, ids)
}

func (d nth) start(ctx context.Context, _ int) (handle, error) {
	p, err := d.peer(ctx)
	if err != nil {
		return nil, fmt.Errorf("aws-node-termination-handler: %w", err)
	}
	return peerHandle{p}, nil
}

type peerHandle struct{ p *harness.NTH }

func (h peerHandle) deliver(ctx context.Context, _ int, event []byte) (delivered, error) {
	return delivered{}, h.p.Send(ctx, event)
}

func (h peerHandle) stop() {}

func (h peerHandle) dump(b *testing.B, _ int) {
	b.Logf("aws-node-termination-handler log (last 60 lines):\n%s", h.p.Tail(60))
}

// waitCompletions waits up to settle for moto's record of the successful
// CompleteLifecycleAction of each instance with its token, and returns the
// calls found (by index; ok false where none was).
func waitCompletions(ctx context.Context, instances, tokens []string, settle time.Duration) ([]moto.LifecycleCall, []bool, error) {
	calls := make([]moto.LifecycleCall, len(instances))
	found := make([]bool, len(instances))
	deadline := time.Now().Add(settle)
	for {
		all, err := env.AWS.LifecycleCalls(ctx)
		if err != nil {
			return nil, nil, err
		}
		left := 0
		for i := range instances {
			if found[i] {
				continue
			}
			for _, c := range all {
				if c.Operation == "CompleteLifecycleAction" && c.OK() && c.Params["InstanceId"] == instances[i] && c.Params["LifecycleActionToken"] == tokens[i] {
					calls[i], found[i] = c, true
					break
				}
			}
			if !found[i] {
				left++
			}
		}
		if left == 0 || !time.Now().Before(deadline) {
			return calls, found, nil
		}
		select {
		case <-ctx.Done():
			return calls, found, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
