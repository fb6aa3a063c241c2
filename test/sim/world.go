// Package sim is a deterministic simulation of node-drainer's bad days: the
// real handler and every real internal package, run against a simulated
// world (an apiserver made of client-go's fake clientset and its tracker,
// kubelets and controllers, EC2, Auto Scaling, Lambda, EventBridge and the
// sweep's schedule) that one seed drives. Time is the simulated time of a
// testing/synctest bubble: it moves only when every goroutine of the world
// and of the function waits, so an hour of bad day runs in milliseconds.
//
// After every step (an API call, a world event) the invariants that step can
// break are checked (invariants.go); a seed that breaks one is replayed with
// `make sim SEEDS=1 SEED=<seed>`, which prints the trace of what happened.
//
// What the world draws at random, it draws from the seed and the name of
// the thing drawn for (hash, not a shared stream), so that goroutines that
// run at the same simulated instant in another order still draw the same.
package sim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// World is one seed's simulated world.
type World struct {
	Seed int64
	Plan Plan

	mu sync.Mutex
	// act is held by each of the world's own steps (its timers): two that
	// come at one instant (an instance started again as its hook is
	// completed) happen one after the other, never interleaved
	act     sync.Mutex
	t0      time.Time
	stopped bool
	quiet   bool              // no event reaches a function (a Lab)
	counts  map[string]uint64 // draws made per key (see roll)
	trace   []string
	steps   int

	kube   *kube
	ec2    *ec2World
	asg    *asgWorld
	lambda *lambdaWorld
	bridge bridge
	inv    *Invariants
	// deploys are the day's deployments and their operator (play.go)
	deploys *deploys
	// calm: no fault is drawn (a deployment's installation before the day)
	calm atomic.Bool
	// policies counts what the day's policies played (policy.go)
	policies map[string]int
}

// newWorld builds the world of a seed; call in the bubble (it reads the
// bubble's clock).
func newWorld(seed int64, inv *Invariants) *World {
	w := &World{Seed: seed, t0: time.Now(), counts: map[string]uint64{}, inv: inv}
	w.Plan = NewPlan(seed)
	return w
}

// now is the time since the world began.
func (w *World) now() time.Duration { return time.Since(w.t0) }

// roll draws a number in [0, 1) for key: the same seed, key and count of
// earlier draws for that key give the same number, whatever else ran first.
func (w *World) roll(key string) float64 {
	w.mu.Lock()
	n := w.counts[key]
	w.counts[key] = n + 1
	w.mu.Unlock()
	return hashFloat(w.Seed, key, n)
}

// Draw is the seed's draw in [0, 1) for key: what the world draws for a
// thing, for a player of the seed's plan outside the world (test/soak).
func Draw(seed int64, key string) float64 { return hashFloat(seed, key, 0) }

func hashFloat(seed int64, key string, n uint64) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%s|%d", seed, key, n)
	return rand.New(rand.NewPCG(h.Sum64(), uint64(seed))).Float64()
}

// tracef records a step of the world, with its time.
func (w *World) tracef(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs  ", w.now().Seconds()) + fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.trace = append(w.trace, line)
	w.steps++
	w.mu.Unlock()
}

// step counts a step that is not traced (a read).
func (w *World) step() {
	w.mu.Lock()
	w.steps++
	w.mu.Unlock()
}

// after runs f after d, unless the world has stopped by then.
func (w *World) after(d time.Duration, f func()) {
	time.AfterFunc(d, func() {
		w.mu.Lock()
		stopped := w.stopped
		w.mu.Unlock()
		if !stopped {
			w.act.Lock()
			defer w.act.Unlock()
			f()
		}
	})
}

// every runs f every d (first after first), until the world stops.
func (w *World) every(first, d time.Duration, f func()) {
	var tick func()
	tick = func() {
		f()
		w.after(d, tick)
	}
	w.after(first, tick)
}

func (w *World) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

func (w *World) isStopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

// Trace is what happened, in order.
func (w *World) Trace() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.trace...)
}

// jitter is a small offset (0–1 ms) for the world's own timers: kubelets and
// controllers never act at exactly the instant the function wakes at, as
// they never do on a real cluster (the fake's watches replay no deletions
// between a list and its watch).
func (w *World) jitter(key string) time.Duration {
	return time.Duration(w.roll("jitter/"+key)*1e6) + time.Microsecond
}

// Plan is what a seed's bad day holds: the configuration, the cluster, the
// events of the world and the rates of its faults. It is drawn once, up
// front, from the seed.
type Plan struct {
	// function
	Env            map[string]string
	LambdaTimeout  time.Duration
	Concurrency    int // reserved concurrency
	HeartbeatSecs  int32
	DefaultResult  string
	OtherHook      bool // another tool's terminate hook on the node group
	ExtraOwnedHook bool // a hook of ours named by HOOK_NAMES (besides the template's)
	SweepEvery     time.Duration
	// Sibling is the default result of a hook of ours beside the
	// template's terminate hook, named by HOOK_NAMES (siblingHook), of
	// SiblingSecs ("": none)
	Sibling     string
	SiblingSecs int32
	OtherMeta   string  // the NotificationMetadata of another tool's hook (JSON or not)
	Deploy      *Deploy // the day's deployments (nil: the groups' hooks are the template's, put before the day)
	// the policies of issue 55 (policy.go): the annotation each app's pods
	// carry ("key=value"; some protect nothing), the node group's policy tags
	Protect   map[string]string
	GroupTags map[string]string

	// cluster
	Nodes        int    // in the node group
	SkippedGroup bool   // one more node, in a group whose nodes a skipped owner manages
	SkippedOwner string // its owner: karpenter (left alone on every path) or managed-nodegroup (released when down)
	Web          int    // replicas of web (PDB: maxUnavailable 1)
	DBs          int    // single-replica stateful pods, each with a ReadWriteOnce volume (PDB minAvailable 1 each)
	Unmanaged    bool   // one pod no controller owns
	// WarmPool: the node group has a warm pool of running instances that
	// takes them back on scale-in (ReuseOnScaleIn): a scaled-in instance
	// waits in Warmed:Pending:Wait (the group has hooks for both
	// transitions: the sweep asks which action holds it), keeps running in
	// the pool with its node, comes back through the launch hook minutes
	// later, and is sometimes scaled in again soon after
	WarmPool bool

	// faults
	APIFault     float64 // probability a request fails (5xx, 429, timeout, conflict)
	StaleList    float64 // probability a list served from the cache misses an object
	WatchDrop    float64 // probability a watch ends early
	WatchExpired float64 // probability a watch from a resourceVersion is refused as too old (410: compacted past it)
	// EvictConflict is the probability an eviction that its PDB allows
	// answers 409: the PDB's status write lost its 20 tries to other writers
	EvictConflict float64
	EC2Lag        float64 // probability a describe is served from before the last change
	EventLoss     float64
	EventDup      float64
	EventLate     float64 // probability an event comes minutes late
	InvokeFail    float64 // probability the function's own Invoke of a continuation fails
	Outages       []Window
	Refusals      []Refusal
	PDBLag        time.Duration
	ControllerUp  bool // a cloud controller deletes the Node of a terminated instance

	Events []Happening
}

// Window is a time span of the world.
type Window struct{ From, To time.Duration }

// Refusal is an admission policy refusing the eviction of pods whose names
// start with Prefix, with Code (422, 403, 500), during the window.
type Refusal struct {
	Window
	Prefix string
	Code   int
}

// Happening is one event of the world: what befalls which node, when.
type Happening struct {
	At   time.Duration
	What string // scale-in, stop, hibernate, crash, kubelet-death, launch, bind, duplicate-scale-in, unready, rebalance
	Node int    // index of the node (0-based; Nodes is the skipped group's)
	For  time.Duration
}

func (h Happening) String() string {
	s := fmt.Sprintf("%s@%s node%d", h.What, h.At, h.Node)
	if h.For > 0 {
		s += " for " + h.For.String()
	}
	return s
}

// NewPlan draws the plan of a seed.
func NewPlan(seed int64) Plan {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	pick := func(vs ...string) string { return vs[r.IntN(len(vs))] }
	chance := func(p float64) bool { return r.Float64() < p }
	p := Plan{
		Env: map[string]string{
			"CLUSTER_NAME":                "sim",
			"DRAIN_TIMEOUT":               pick("3m", "10m", "30m"),
			"LIFECYCLE_RESULT_ON_FAILURE": pick("CONTINUE", "ABANDON"),
			"DEAD_NODE_EVICTION_WINDOW":   pick("10s", "30s"),
			"STOPPING_WAIT_TIMEOUT":       pick("1m", "3m"),
			"VOLUME_DETACH_TIMEOUT":       pick("30s", "2m"),
			"DELETE_TERMINATED_NODES":     pick("false", "true"),
			"OUT_OF_SERVICE_TAINT":        "true",
			"AWS_LAMBDA_FUNCTION_NAME":    "node-drainer",
			"ZOMBIE_AFTER":                "10m",
			"ZOMBIE_ACTION":               "report",
		},
		LambdaTimeout: []time.Duration{time.Minute, 3 * time.Minute, 15 * time.Minute}[r.IntN(3)],
		Concurrency:   []int{3, 5, 50}[r.IntN(3)],   // below 3, one long drain starves the rest (docs/testing.md)
		HeartbeatSecs: []int32{360, 600}[r.IntN(2)], // the templates' default, the least with a sweep every 5 minutes (internal/hooks/sweepperiod.go)
		DefaultResult: pick("CONTINUE", "ABANDON"),
		OtherHook:     chance(0.3),
		SweepEvery:    5 * time.Minute,
		Nodes:         3 + r.IntN(2),
		SkippedGroup:  chance(0.25),
		Web:           2 + r.IntN(4),
		DBs:           1 + r.IntN(2),
		Unmanaged:     chance(0.3),
		ControllerUp:  chance(0.5),
		PDBLag:        time.Duration(r.IntN(5000)) * time.Millisecond,
	}
	p.SkippedOwner = pick("karpenter", "managed-nodegroup")
	if chance(0.3) {
		p.ExtraOwnedHook = true
		p.Env["HOOK_NAMES"] = "drain-extra"
	}
	level := r.IntN(4) // 0: a calm day … 3: everything fails often
	rates := []float64{0, 0.02, 0.08, 0.2}[level]
	p.APIFault = rates
	p.StaleList = rates * 2
	p.WatchDrop = rates
	p.WatchExpired = rates
	p.EvictConflict = rates / 2
	p.EC2Lag = rates * 2
	p.EventLoss = rates / 2
	p.EventDup = rates
	p.EventLate = rates / 2
	p.InvokeFail = rates / 2
	for range r.IntN(level + 1) {
		from := time.Duration(r.IntN(1200)) * time.Second
		p.Outages = append(p.Outages, Window{from, from + time.Duration(5+r.IntN(55))*time.Second})
	}
	if chance(0.3) {
		from := time.Duration(r.IntN(900)) * time.Second
		to := from + time.Duration(10+r.IntN(600))*time.Second
		if chance(0.2) {
			to = 24 * time.Hour // a policy that never lets go
		}
		p.Refusals = append(p.Refusals, Refusal{Window{from, to}, pick("web-", "db-"), []int{422, 403, 500}[r.IntN(3)]})
	}
	nodes := p.Nodes
	if p.SkippedGroup {
		nodes++
	}
	whats := []string{"scale-in", "scale-in", "scale-in", "stop", "hibernate", "crash", "kubelet-death", "launch", "bind", "duplicate-scale-in", "unready"}
	for range 1 + r.IntN(3) {
		h := Happening{At: time.Duration(5+r.IntN(1200)) * time.Second, What: whats[r.IntN(len(whats))], Node: r.IntN(nodes)}
		switch h.What {
		case "stop", "hibernate", "kubelet-death":
			if chance(0.6) {
				h.For = time.Duration(30+r.IntN(900)) * time.Second // then it starts (or the kubelet comes back)
			}
		case "bind":
			h.For = time.Duration(r.IntN(30000)) * time.Millisecond // after the next scale-in of the node starts
		case "unready":
			h.For = time.Duration(60+r.IntN(600)) * time.Second // NotReady, then scaled in meanwhile
		}
		p.Events = append(p.Events, h)
	}
	sort.SliceStable(p.Events, func(i, j int) bool { return p.Events[i].At < p.Events[j].At })
	p.WarmPool = chance(0.25) // drawn last: the plans drawn before warm pools came stay as they were
	drawDeploy(seed, &p)
	drawPolicies(seed, &p)
	return p
}

// String is the plan in one paragraph, for a failing seed's report.
func (p Plan) String() string {
	var env []string
	for k, v := range p.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	var evs []string
	for _, e := range p.Events {
		evs = append(evs, e.String())
	}
	return fmt.Sprintf("nodes=%d skippedGroup=%v/%s warmPool=%v web=%d dbs=%d unmanaged=%v lambdaTimeout=%s concurrency=%d heartbeat=%ds default=%s otherHook=%v extraHook=%v sibling=%s/%ds apiFault=%.2f outages=%v refusals=%v controller=%v\n  deploy: %s\n  policies: pods %v, group tags %v\n  env: %s\n  events: %s",
		p.Nodes, p.SkippedGroup, p.SkippedOwner, p.WarmPool, p.Web, p.DBs, p.Unmanaged, p.LambdaTimeout, p.Concurrency, p.HeartbeatSecs, p.DefaultResult,
		p.OtherHook, p.ExtraOwnedHook, p.Sibling, p.SiblingSecs, p.APIFault, p.Outages, p.Refusals, p.ControllerUp, p.Deploy, p.Protect, p.GroupTags, strings.Join(env, " "), strings.Join(evs, ", "))
}
