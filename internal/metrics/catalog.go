package metrics

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Dimension names of node-drainer's metrics.
const (
	DimFunctionName     = "FunctionName"     // the Lambda function's name: two deployments stay apart
	DimEvent            = "Event"            // the event kind (internal/event's Kind)
	DimResult           = "Result"           // the outcome's action, or dry-run
	DimLifecycleResult  = "LifecycleResult"  // CONTINUE or ABANDON
	DimCompletionReason = "CompletionReason" // why a hook was completed: the action, at-deadline, dry-run
)

// Metric names node-drainer writes (internal/handler).
const (
	Invocations       = "Invocations"
	DurationSeconds   = "DurationSeconds"
	DrainSeconds      = "DrainSeconds"
	PodsEvicted       = "PodsEvicted"
	PDBBlockedSeconds = "PDBBlockedSeconds"
	RWOForceReleases  = "RWOForceReleases"
	RWOReleaseSeconds = "RWOReleaseSeconds"
	Continuations     = "Continuations"
	KubeAPIRetries    = "KubeAPIRetries"
	KubeAPIRetriesFor = "KubeAPIRetries." // + a cause (internal/cluster's Cause): one metric per cause
	SweepHooks        = "SweepHooks"
	SweepDeadNodes    = "SweepDeadNodes"
	SweepUnmarked     = "SweepUnmarked"
	SweepOrphans      = "SweepOrphans"
	SweepZombies      = "SweepZombies"
	SweepReplaced     = "SweepReplaced"
	SweepFailed       = "SweepFailed"
	// the sweep found the function's removal mark (internal/hooks/removal.go): written
	// only then, 1
	SweepRemovalMarked = "SweepRemovalMarked"
	HooksCompleted     = "HooksCompleted"
	// outcome events (OUTCOME_EVENT_BUS) put, and not put: in all and by
	// why (internal/outcome's Lost reasons: one metric per reason)
	OutcomeEventsPut       = "OutcomeEventsPut"
	OutcomeEventsFailed    = "OutcomeEventsFailed"
	OutcomeEventsFailedFor = "OutcomeEventsFailed."
	// a group's policy tag refused, or the group unread: its setting's own
	// value taken (GROUP_POLICY_TAGS)
	GroupPolicyDefaulted = "GroupPolicyDefaulted"
)

// Metric is one metric of the catalog: its name (a prefix when Prefix is
// set: the metric is Name+something), unit and the dimension sets it is
// published with, each set's names sorted.
type Metric struct {
	Name          string
	Prefix        bool
	Unit          Unit
	DimensionSets [][]string
}

// The dimension sets the handler writes: one directive by event kind and
// result, one by lifecycle result and by completion reason.
var (
	byEventResult = [][]string{{DimEvent, DimFunctionName, DimResult}}
	byCompletion  = [][]string{{DimFunctionName, DimLifecycleResult}, {DimCompletionReason, DimFunctionName}}
)

// Catalog is every metric node-drainer writes, in namespace Namespace. The
// dashboards and alarms of both templates may name only these (test/deploy
// checks them), and every line the handler writes keeps to it
// (CheckCatalog, in the handler's tests).
var Catalog = []Metric{
	{Name: Invocations, Unit: Count, DimensionSets: byEventResult},
	{Name: DurationSeconds, Unit: Seconds, DimensionSets: byEventResult},
	{Name: DrainSeconds, Unit: Seconds, DimensionSets: byEventResult},
	{Name: PodsEvicted, Unit: Count, DimensionSets: byEventResult},
	{Name: PDBBlockedSeconds, Unit: Seconds, DimensionSets: byEventResult},
	{Name: RWOForceReleases, Unit: Count, DimensionSets: byEventResult},
	{Name: RWOReleaseSeconds, Unit: Seconds, DimensionSets: byEventResult},
	{Name: Continuations, Unit: Count, DimensionSets: byEventResult},
	{Name: KubeAPIRetries, Unit: Count, DimensionSets: byEventResult},
	{Name: KubeAPIRetriesFor, Prefix: true, Unit: Count, DimensionSets: byEventResult},
	{Name: SweepHooks, Unit: Count, DimensionSets: byEventResult},
	{Name: SweepDeadNodes, Unit: Count, DimensionSets: byEventResult},
	{Name: SweepUnmarked, Unit: Count, DimensionSets: byEventResult},
	{Name: SweepOrphans, Unit: Count, DimensionSets: byEventResult},
	{Name: SweepZombies, Unit: Count, DimensionSets: byEventResult},
	{Name: SweepReplaced, Unit: Count, DimensionSets: byEventResult},
	{Name: SweepFailed, Unit: Count, DimensionSets: byEventResult},
	{Name: SweepRemovalMarked, Unit: Count, DimensionSets: byEventResult},
	{Name: HooksCompleted, Unit: Count, DimensionSets: byCompletion},
	{Name: OutcomeEventsPut, Unit: Count, DimensionSets: byEventResult},
	{Name: OutcomeEventsFailed, Unit: Count, DimensionSets: byEventResult},
	{Name: OutcomeEventsFailedFor, Prefix: true, Unit: Count, DimensionSets: byEventResult},
	{Name: GroupPolicyDefaulted, Unit: Count, DimensionSets: byEventResult},
}

// Lookup finds name in the catalog (a prefixed metric by its prefix).
func Lookup(name string) (Metric, bool) {
	for _, m := range Catalog {
		if !m.Prefix && m.Name == name || m.Prefix && strings.HasPrefix(name, m.Name) && len(name) > len(m.Name) {
			return m, true
		}
	}
	return Metric{}, false
}

// HasDimensions says whether m is published with exactly the dimension
// names dims (in any order).
func (m Metric) HasDimensions(dims []string) bool {
	want := slices.Clone(dims)
	slices.Sort(want)
	return slices.ContainsFunc(m.DimensionSets, func(set []string) bool { return slices.Equal(set, want) })
}

// CheckCatalog checks that every metric of an EMF line (one Validate
// accepts) is in the catalog, in Namespace, with the unit and dimension sets
// the catalog gives it.
func CheckCatalog(line []byte) error {
	var doc struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
	}
	if err := json.Unmarshal(line, &doc); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	for _, d := range doc.AWS.CloudWatchMetrics {
		if d.Namespace != Namespace {
			return fmt.Errorf("namespace %q, want %q", d.Namespace, Namespace)
		}
		for _, dm := range d.Metrics {
			m, ok := Lookup(dm.Name)
			if !ok {
				return fmt.Errorf("metric %s is not in the catalog", dm.Name)
			}
			if dm.Unit != string(m.Unit) {
				return fmt.Errorf("metric %s: unit %q, the catalog says %q", dm.Name, dm.Unit, m.Unit)
			}
			if len(d.Dimensions) != len(m.DimensionSets) {
				return fmt.Errorf("metric %s: dimension sets %v, the catalog says %v", dm.Name, d.Dimensions, m.DimensionSets)
			}
			for _, set := range d.Dimensions {
				if !m.HasDimensions(set) {
					return fmt.Errorf("metric %s: dimension set %v, the catalog says %v", dm.Name, set, m.DimensionSets)
				}
			}
		}
	}
	return nil
}
