// Package sweep reconciles what events missed. It reads the sources of truth
// in a few batched calls — every Node (one paginated list), every
// VolumeAttachment, node-drainer's Leases, the cluster's Auto Scaling groups
// with their instances' lifecycle states, and EC2's view of every instance
// concerned — and plans what the function's own paths must do: hooks left
// waiting, nodes of instances that are down, marks whose reasons lapsed,
// attachments to nodes that are gone, nodes NotReady on a running instance,
// and Leases nobody needs any more.
//
// Read is all or nothing: when one list or describe fails, there is no
// Readings and nothing may be acted upon. Plan is a pure function of the
// Readings; the handler carries the plan out through its usual paths, each
// of which reads again what it needs at the moment of acting.
package sweep

import (
	"context"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/node"
)

// ASGAPI is the part of Auto Scaling the sweep uses.
type ASGAPI interface {
	autoscaling.DescribeAutoScalingGroupsAPIClient
	DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
}

// Config is what the sweep needs of the function's configuration.
type Config struct {
	ClusterTagKey string
	// ASGNames and GroupTag choose the groups read: the listed ones and
	// those carrying the tag; neither: the groups carrying ClusterTagKey.
	ASGNames []string
	GroupTag discovery.Tag
	// HookNames are the lifecycle hooks that are ours (config's
	// OwnedHooks): only their actions are taken; another tool's hook on
	// the same group is left alone (rule 14). None: no hook is taken.
	HookNames []string
	// TerminateHook and LaunchHook are the templates' names
	// (TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME): of two hooks of ours on one
	// transition, the one an instance is drained under first; else the
	// first by name.
	TerminateHook, LaunchHook string
	LeaseNamespace            string
	// ZombieAfter is how long a Node may be NotReady on a running instance
	// before it is reported (and, with ZombieReplace, replaced).
	ZombieAfter       time.Duration
	ZombieReplace     bool
	ZombieMaxPerSweep int
	ZombieMaxASGShare float64 // of a group's in-service instances, 0–1
	// Clock times the reading and stamps what EC2 said (nil: the real
	// clock).
	Clock clock.PassiveClock

	// ShardNodes, when > 0, is the most Nodes one invocation reads and acts
	// on: the scheduled invocation (shard 0) reads every Node page by page,
	// acts on the first ShardNodes, and notes the continue token where each
	// next shard starts (Readings.Shards), keeping of the Nodes past its own
	// only their names and instance ids (for orphaned attachments and
	// Leases, which it alone plans). A rounding to whole pages: a shard is
	// ShardNodes/node.PageSize pages.
	ShardNodes int
	// Shard, when set, makes this reading shard Shard.Index ≥ 1 of a pass:
	// its Nodes from Shard.Continue, ShardNodes of them; it plans only what
	// concerns them (dead, unmarked, zombie nodes): no hooks, orphans or
	// Leases, which are shard 0's.
	Shard *event.SweepShard
	// ZombiesElsewhere, when set, says why this invocation only reports its
	// zombies (another shard of the pass replaces zombies: one does, in
	// turns, so that the pass's limits hold).
	ZombiesElsewhere string
	// Tagged, when not nil, are the groups carrying GroupTag as this pass
	// already read them (discovery.Ensure, a moment before): the reading
	// takes them, instances included, instead of describing them again.
	Tagged []astypes.AutoScalingGroup
}

// pagesPerShard is how many pages of Nodes a shard reads.
func (c Config) pagesPerShard() int {
	return max(1, c.ShardNodes/int(node.PageSize))
}

// clock is c's clock, or the real one.
func (c Config) clock() clock.PassiveClock {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

// leaseIdle is how long an unheld Lease of an instance without a Node is
// kept before the sweep deletes it.
const leaseIdle = time.Hour

// ASG lifecycle states the sweep acts on.
const (
	stateTerminatingWait   = "Terminating:Wait"
	statePendingWait       = "Pending:Wait"
	stateWarmedPendingWait = "Warmed:Pending:Wait" // entering a warm pool: launched, or scaled in (ReuseOnScaleIn)
	stateInService         = "InService"
)

// Group is an Auto Scaling group and the lifecycle hooks it has for a
// transition some instance of it waits in (read only for such groups).
type Group struct {
	Name      string
	Instances []astypes.Instance
	// Pool are the instances in the group's warm pool, which
	// DescribeAutoScalingGroups does not list (DescribeWarmPool; read only
	// for a group with a warm pool).
	Pool  []astypes.Instance
	Hooks []astypes.LifecycleHook
	warm  bool
}

// all is the group's instances, those of its warm pool included.
func (g Group) all() []astypes.Instance { return slices.Concat(g.Instances, g.Pool) }

// WarmPoolAPI reads a group's warm pool: the SDK's client has it; a fake
// without it reads no pool.
type WarmPoolAPI interface {
	DescribeWarmPool(ctx context.Context, in *autoscaling.DescribeWarmPoolInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error)
}

var _ WarmPoolAPI = (*autoscaling.Client)(nil)

// Readings are one consistent-enough view of the cluster and its instances.
type Readings struct {
	Now         time.Time
	Nodes       []corev1.Node
	Attachments []storagev1.VolumeAttachment
	Leases      []coordinationv1.Lease
	Groups      []Group
	// Instances is EC2's view, by id, of the cluster's instances that are
	// not running and of the instances of the nodes that look wrong
	// (NotReady, or marked); one EC2 did not list is there, not Found. A
	// node whose instance is not here is well as far as the sweep can tell.
	Instances map[string]instance.Instance
	// ByDNSName is EC2's view of the nodes attachments name that are not in
	// the cluster (EKS names a node after its instance's private DNS name).
	ByDNSName map[string][]instance.Instance
	// PodsOn counts, for every node whose instance is down, the pods bound
	// to it that are not a DaemonSet's.
	PodsOn map[string]int
	// Took says how long each source took to read: cluster, autoscaling, ec2, pods.
	Took map[string]time.Duration
	// Shards are the continue tokens where the pass's next shards start
	// (shard 0 of a pass in shards; none: the pass is this reading).
	Shards []string
	// Elsewhere counts the Nodes of the other shards (shard 0 reads them by
	// name).
	Elsewhere int

	// names and ids are every Node's name and instance id read (for a
	// shard ≥ 1: its own); own the names of the Nodes in Nodes.
	names, own, ids map[string]bool
}

func (r *Readings) hasNode(name string) bool {
	if r.names == nil { // readings made by hand (tests)
		r.names = map[string]bool{}
		for _, n := range r.Nodes {
			r.names[n.Name] = true
		}
	}
	return r.names[name]
}

func ownedByDaemonSet(p corev1.Pod) bool {
	c := metav1.GetControllerOf(&p)
	return c != nil && c.Kind == "DaemonSet"
}

// Zombie is a Node NotReady on an instance EC2 reports running.
type Zombie struct {
	Node       string
	InstanceID string
	ASG        string
	Since      time.Time
	// Replace: mark the instance Unhealthy in its group (within the limits);
	// otherwise report only, Why says why.
	Replace bool
	Why     string
}

// Orphan is a VolumeAttachment to a node the cluster does not have, whose
// instance EC2 reported terminated or did not know at the reading.
type Orphan struct {
	Attachment storagev1.VolumeAttachment
	// Instances are the ids of the instances EC2 listed under the node's
	// name at the reading (all terminated); none when EC2 knew no instance
	// of that name.
	Instances []string
}

// Plan is what the sweep does.
type Plan struct {
	Hooks   []Hook
	Dead    []string // instance ids of nodes to release (abrupt path)
	Unmark  []string // instance ids of nodes with marks to lift (recover path)
	Orphans []Orphan
	Zombies []Zombie
	Leases  []coordinationv1.Lease // to delete
	// Held are instances left alone because an invocation holds their lease.
	Held []string
	// Notes say what was seen and left alone, and why.
	Notes []string
}

// Empty reports a plan with nothing to do.
func (p Plan) Empty() bool {
	return len(p.Hooks)+len(p.Dead)+len(p.Unmark)+len(p.Orphans)+len(p.Zombies)+len(p.Leases) == 0
}

// leaseHolds reads node-drainer's Leases (advisory ones aside): held are
// the instances whose hooks an invocation is handling now, taken those an
// invocation took at some point (a Lease of theirs is there, held or
// lapsed). An advisory drain's lease does not count: the hook waiting
// behind a spot warning or a rebalance drain is the sweep's to carry, as
// its event would have been (the two drains are of the same node, in
// turns).
func (r *Readings) leaseHolds() (held, taken map[string]bool) {
	held, taken = map[string]bool{}, map[string]bool{}
	for _, l := range r.Leases {
		if lease.Advisory(l.Name) {
			continue
		}
		id := lease.InstanceID(l.Name)
		taken[id] = true
		if lease.Held(&l, r.Now) {
			held[id] = true
		}
	}
	return held, taken
}

type membership struct{ name, state string }

func (r *Readings) groupOf() map[string]membership {
	m := map[string]membership{}
	for _, g := range r.Groups {
		for _, i := range g.all() {
			m[aws.ToString(i.InstanceId)] = membership{g.Name, string(i.LifecycleState)}
		}
	}
	return m
}

// leaving counts a group's instances on their way out or marked unhealthy.
func (r *Readings) leaving(asg string) int {
	n := 0
	for _, g := range r.Groups {
		if g.Name != asg {
			continue
		}
		for _, i := range g.Instances {
			if string(i.LifecycleState) != stateInService || aws.ToString(i.HealthStatus) != "Healthy" {
				n++
			}
		}
	}
	return n
}

func (r *Readings) size(asg string) int {
	for _, g := range r.Groups {
		if g.Name == asg {
			return len(g.Instances)
		}
	}
	return 0
}

// shareOf is how many of size instances share allows at once: at least one.
func shareOf(share float64, size int) int {
	return max(1, int(math.Floor(share*float64(size))))
}

// ec2DNSName matches the names EC2 gives instances (ip-name and
// resource-name), the only node names EC2 can be asked about.
var ec2DNSName = regexp.MustCompile(`^(ip-[0-9-]+|i-[0-9a-f]+)\.`)

// resourceName matches a node named after its instance's id (EC2's
// resource-based names, i-0123….ec2.internal): the id is in the name.
var resourceName = regexp.MustCompile(`^(i-[0-9a-f]+)\.`)

// ReadAgain reads EC2 again at the moment of acting on the orphan (the
// reading is up to a whole sweep old): every instance that has the node's
// name now (one filtered call), and by id those the reading saw under that
// name and the one a resource-based name carries. The attachment is still
// an orphan only when every one of them is down — terminated, stopped (not
// hibernated) or unknown to EC2 —, and not when one is pending, running,
// stopping, shutting down or hibernated: evidence says what was read. An
// error means EC2 could not be read, and nothing may be done now.
func (o Orphan) ReadAgain(ctx context.Context, api instance.EC2API, clk clock.PassiveClock) (orphaned bool, evidence string, err error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	name := o.Attachment.Spec.NodeName
	named, err := instance.List(ctx, api, clk, "private-dns-name", []string{name})
	if err != nil {
		return false, "", err
	}
	ids := slices.Clone(o.Instances)
	if m := resourceName.FindStringSubmatch(name); m != nil {
		ids = append(ids, m[1])
	}
	for _, id := range ids {
		if _, ok := named[id]; ok {
			continue
		}
		i, err := instance.Describe(ctx, api, clk, id)
		if err != nil {
			return false, "", err
		}
		named[id] = i
	}
	if len(named) == 0 {
		return true, fmt.Sprintf("EC2 lists no instance named %s (as of %s)", name, clk.Now().UTC().Format(time.RFC3339)), nil
	}
	var seen []string
	for _, id := range slices.Sorted(maps.Keys(named)) {
		i := named[id]
		if !i.Down() {
			return false, i.String(), nil
		}
		seen = append(seen, i.String())
	}
	return true, strings.Join(seen, "; "), nil
}

// orphanEvidence says why an attachment to a node the cluster does not have
// must be kept ("" when EC2 confirms the instance terminated or gone).
func (r *Readings) orphanEvidence(name string) string {
	if !ec2DNSName.MatchString(name) {
		return "the node's name is not an EC2 DNS name, so EC2 cannot confirm its instance is gone"
	}
	for _, i := range r.ByDNSName[name] {
		if i.State != instance.StateTerminated {
			return i.String()
		}
	}
	return ""
}

// notReadySince reports whether the node's Ready condition is not True, and
// since when.
func notReadySince(n corev1.Node) (time.Time, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastTransitionTime.Time, c.Status != corev1.ConditionTrue
		}
	}
	return n.CreationTimestamp.Time, true
}
