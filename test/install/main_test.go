// Package install runs the deploy descriptions the way a user does: terraform
// init/apply/destroy of the module and SAM's build/transform/deploy of the
// template, against the AWS emulator and the harness's apiserver, then the
// landed bootstrap with exactly the configuration they created, draining a
// node of the harness end to end; and, beside them, terraform's upgrade from
// a previous release's module to this commit's (upgrade_test.go).
//
// `make deploy-test` runs it and prints one line of results:
//
//	terraform_apply=ok terraform_drain=ok rbac_follows_config=ok metrics_every_level=ok terraform_destroy=ok uninstall_clean_terraform=ok terraform_upgrade=ok terraform_compose=ok sam_transform=ok sam_deploy=ok sam_drain=ok metrics_every_level_sam=ok uninstall_clean_sam=ok deploy_paths_equal=ok tag_discovery=ok outcome_events=ok
//
// tag_discovery is ok when both paths' tag discovery passed (tags_test.go):
// a node group tagged after the deploy gets its hook from the function's
// sweep and its node drained, with no redeploy; an untagged one is left
// alone.
//
// Both paths deploy with a LEASE_NAMESPACE that is not the default
// (deployLeaseNamespace); rbac_follows_config checks terraform's RBAC for it
// and for delete_terminated_nodes false (rbac_test.go). metrics_every_level
// re-applies terraform's with log_level WARN, then ERROR, drains a node with
// each, and applies Lambda's log-level filter rule to the function's real
// output: the drain's metrics line is kept (metrics_test.go);
// metrics_every_level_sam does the same with SAM's stack updated to
// LogLevel WARN, then ERROR (samupdate_test.go). outcome_events is ok when
// each path, updated with a bus and a target (an SQS queue in the emulator,
// which sends no rule's events to SNS), routes the drain's outcome events
// to the target as one line each (outcomes_test.go; SAM's through
// UpdateStack). uninstall_clean_terraform and uninstall_clean_sam read back,
// after terraform destroy and the stack's delete, that no hook of ours is
// left on any listed or tagged group (another tool's kept), no Lease of
// ours and no mark of ours on any node (uninstall_test.go).
//
// and exits non-zero when any is not ok (sam_deploy may be partial:<types>,
// the resource types the emulator's CloudFormation skips and the test
// checked on the transformed template instead; tag_discovery and
// outcome_events are partial:<path> when one path alone ran them, which
// -require-all does not accept). A step that -run leaves out is not-run.
package install

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/node-drainer/node-drainer/test/harness"
)

var (
	env       *harness.Env
	bootstrap string

	requireAll = flag.Bool("require-all", false, "fail unless every reported step ran and is ok (make deploy-test)")
	onlyPath   = flag.String("only", "", "run one deploy path alone: terraform (with its upgrade and compose steps) or sam; empty: both")
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := harness.Main(m, &env, &bootstrap)
	if !results.report(os.Stdout, *requireAll) && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// reported are the steps of the results line, in order.
var reported = []string{
	"terraform_apply", "terraform_drain", "rbac_follows_config", "metrics_every_level", "terraform_destroy", "uninstall_clean_terraform",
	"terraform_upgrade", "terraform_compose",
	"sam_transform", "sam_deploy", "sam_drain", "metrics_every_level_sam", "uninstall_clean_sam",
	"deploy_paths_equal", "tag_discovery", "outcome_events",
}

// ofBothPaths are the reported steps bothPaths sets: partial:<path> (one
// path alone checked) is not all good.
var ofBothPaths = map[string]bool{"tag_discovery": true, "outcome_events": true}

// results holds each reported step's value: "ok", "partial:<what>" (only
// sam_deploy) or "failed".
var results = &stepResults{m: map[string]string{}}

type stepResults struct {
	mu sync.Mutex
	m  map[string]string
}

func (r *stepResults) set(name, value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[name] = value
}

func (r *stepResults) get(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[name]
}

// report prints the results line and says whether it is all good: every step
// that ran is ok (or partial), and with all every step ran.
func (r *stepResults) report(w io.Writer, all bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	good := true
	var parts []string
	for _, name := range reported {
		v, ran := r.m[name]
		switch {
		case !ran:
			v = "not-run"
			good = good && !all
		case v != "ok" && !strings.HasPrefix(v, "partial:"):
			good = false
		case v != "ok" && ofBothPaths[name]:
			good = good && !all
		}
		parts = append(parts, name+"="+v)
	}
	fmt.Fprintln(w, strings.Join(parts, " "))
	return good
}

// step runs one reported step as a subtest of t. Its value is "ok", or what
// f returns when that is not empty (sam_deploy's "partial:<types>"), when the
// subtest passes, and "failed" otherwise. It says whether the step passed, so
// a caller stops at the first failed step; a step that -run leaves out did
// not pass, and its value stays unset (not-run).
func step(t *testing.T, name string, f func(t *testing.T) string) bool {
	t.Helper()
	value, ran := "failed", false
	ok := t.Run(name, func(t *testing.T) {
		ran = true
		v := f(t)
		if t.Failed() {
			return
		}
		if v == "" {
			v = "ok"
		}
		value = v
	})
	if !ran {
		return false
	}
	if !ok {
		value = "failed"
	}
	results.set(name, value)
	return ok
}

// created is what one path created, read back from the emulator's AWS APIs
// and the cluster (never from the path's own source), in the canonical terms
// of canon_test.go; deploy_paths_equal compares the two field by field.
// Names and ARNs that differ by construction (generated names, the stack's
// prefix, the test's ASG names) are replaced by the placeholders for what
// they stand for (<function>, <role>, <log-group>, <dead-letter-queue>,
// <dead-letter-queue-url>, <asg0>, <asg1>, ...).
type created struct {
	// Function (functionKeys): runtime, architectures, handler, timeout,
	// memory_size, reserved_concurrency ("none" when unset),
	// async_retry_attempts, async_max_event_age, dead_letter (the
	// asynchronous on-failure destination), dlq_retention_seconds, dlq_sse
	// (SqsManagedSseEnabled), log_retention_days; as strings.
	Function map[string]string
	// Env is the function's environment.
	Env map[string]string
	// Patterns are the event patterns of the EventBridge rules that target
	// the function, as canonical JSON, sorted; Schedules their schedule
	// expressions and states ("rate(5 minutes) ENABLED").
	Patterns, Schedules []string
	// Targets are the rules' targets as canonical JSON, sorted: Rule (the
	// rule's name without the function's name and its dash), Arn,
	// DeadLetter, MaximumEventAgeInSeconds, MaximumRetryAttempts.
	Targets []string
	// Alarms are the CloudWatch alarms' names without the function's name
	// and its dash, sorted.
	Alarms []string
	// Dashboards are the CloudWatch dashboards, each as "name: body" (the
	// body as canonical JSON), the function's name replaced by <function>.
	Dashboards []string
	// Statements are the role's permission statements (inline, managed and
	// role policies), see statementSet.
	Statements []string
	// QueuePolicy are the dead-letter queue's policy statements, as
	// Statements.
	QueuePolicy []string
	// Hooks maps a lifecycle transition to its hooks' settings (the same on
	// every listed ASG), as sorted "name=value" strings.
	Hooks map[string][]string
	// AccessEntryGroups are the Kubernetes groups of the EKS access entry.
	AccessEntryGroups []string

	// FromTemplate is not compared: what the path could not read back from
	// the emulator and took from its own description instead (SAM: the
	// resource types the emulator's CloudFormation skipped and the
	// properties it dropped, resolved from the transformed template).
	FromTemplate []string `compare:"-"`
}

// installed hands what terraform's path created on an empty state to the
// upgrade, which compares what it converged to with it: nil when that
// path's apply failed or did not run.
type installed struct {
	once sync.Once
	done chan struct{}
	c    *created
}

func newInstalled() *installed { return &installed{done: make(chan struct{})} }

// set publishes c; only the first call counts.
func (i *installed) set(c *created) {
	i.once.Do(func() {
		i.c = c
		close(i.done)
	})
}

// wait returns what set published.
func (i *installed) wait(ctx context.Context) (*created, error) {
	select {
	case <-i.done:
		return i.c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tfInstalled is this run's (TestDeploy sets it).
var tfInstalled = newInstalled()

// paths are the deploy paths, registered by their files: each runs its
// reported steps as subtests and returns what it created (nil when a step
// failed before it could be read back).
var paths = map[string]func(t *testing.T) *created{}

// TestDeploy runs terraform's path, then SAM's, then the example that
// composes a node group and node-drainer (compose_test.go), then compares
// what the two paths created; the upgrade runs beside them (its own function name and ASGs,
// no objects of its own in the cluster), so that its applies overlap theirs;
// its destroy waits for the paths (pathsDone) and overlaps the compose step.
func TestDeploy(t *testing.T) {
	tfInstalled = newInstalled()
	svcCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	lambdaSvc = serveLambda(t, svcCtx)
	defer func() { lambdaSvc = nil }()
	pathsDone = make(chan struct{})
	tf := *onlyPath == "" || *onlyPath == "terraform"
	upgraded := make(chan struct{})
	go func() {
		defer close(upgraded)
		if tf {
			terraformUpgrade(t)
		}
	}()
	defer func() { <-upgraded }()
	// closed after the paths, or when a path stops the test (t.Fatal): the
	// upgrade waiting for it must not wait for its timeout
	var donePaths sync.Once
	endPaths := func() { donePaths.Do(func() { close(pathsDone) }) }
	defer endPaths()
	got := map[string]*created{}
	for _, name := range []string{"terraform", "sam"} {
		if run, ok := paths[name]; ok && (*onlyPath == "" || *onlyPath == name) {
			got[name] = run(t)
		}
	}
	endPaths()
	// after both paths: it runs under the harness's RBAC, which terraform's
	// path replaces with its own while it runs
	if tf {
		terraformCompose(t)
	}
	bothPaths("tag_discovery")
	bothPaths("outcome_events")
	if got["terraform"] == nil || got["sam"] == nil {
		return
	}
	step(t, "deploy_paths_equal", func(t *testing.T) string {
		comparePaths(t, got["terraform"], got["sam"])
		return ""
	})
}

// pathsDone is closed once terraform's and SAM's paths have run. Every
// deployment chooses groups by the same tag (the templates' default), and
// destroying one removes its hooks from every tagged group: the upgrade
// destroys its deployment after the paths, whose steps put hooks on tagged
// groups and rely on them (tag_discovery, terraform_destroy).
var pathsDone chan struct{}

// waitPaths waits until the paths have run, or ctx ends.
func waitPaths(ctx context.Context) {
	select {
	case <-pathsDone:
	case <-ctx.Done():
	}
}

// bothPaths sets name (tag_discovery, outcome_events) from the two paths'
// steps name_terraform and name_sam: ok when both passed, failed when one
// failed; unset (not-run) when neither ran; partial:<path> when one path
// alone ran and passed.
func bothPaths(name string) {
	tf, sam := results.get(name+"_terraform"), results.get(name+"_sam")
	switch {
	case tf == "ok" && sam == "ok":
		results.set(name, "ok")
	case tf == "failed" || sam == "failed":
		results.set(name, "failed")
	case tf == "ok":
		results.set(name, "partial:terraform")
	case sam == "ok":
		results.set(name, "partial:sam")
	}
}
