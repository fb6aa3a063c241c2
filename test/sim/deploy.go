package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
)

// Deploy is a day's deployments: how node-drainer was installed, what
// changes during the day, and its uninstall. The requests are the
// templates' (SAM's custom resource, its release step before the grants
// and the main step after; terraform's aws_lambda_invocation CRUD), each
// served by the real Keeper (internal/hooks) in an invocation of the
// function, as CloudFormation and terraform invoke it.
type Deploy struct {
	Tool   string // sam or terraform
	Listed bool   // the node group is in AsgNames (SAM), else tagged
	Far    bool   // a group of another cluster carries the same tag
	Hand   string // "json", "text": a hook of our terminate name made by hand on a tagged group ("": none)
	// Changes are the day's changes: heartbeat (HeartbeatTimeout 360↔600),
	// join, leave (a group joins and leaves AsgNames, or its tag for
	// terraform), untag, retag (the spare group's tag)
	Changes  []Change
	RemoveAt time.Duration // the uninstall
	// FailedDestroy (terraform): a destroy that fails half-way at this
	// time (a hook's deletion refused), then an apply, which does not
	// invoke the unchanged hooks resource again (0: none)
	FailedDestroy time.Duration
	// Two: a second deployment in the account (another cluster, the same
	// tag and hook names), a group carrying the tag and no cluster's tag
	// between them; both uninstalled at the same moment
	Two bool
}

// Change is one change of a day's deployment.
type Change struct {
	At   time.Duration
	What string
}

func (c Change) String() string { return fmt.Sprintf("%s@%s", c.What, c.At) }

// The deployments' names: the main one's function (the plan's), the
// second's.
const (
	mainOwner   = "node-drainer"
	secondOwner = "node-drainer-b"
)

// drawDeploy draws a day's deployments (nil: a day without, the groups'
// hooks the template's), from a stream of its own: the plans drawn before
// deployments came stay as they were.
func drawDeploy(seed int64, p *Plan) {
	r := rand.New(rand.NewPCG(uint64(seed), 0xde9107))
	chance := func(x float64) bool { return r.Float64() < x }
	if chance(0.5) {
		p.Sibling = []string{"CONTINUE", "ABANDON"}[r.IntN(2)]
		p.SiblingSecs = []int32{360, 600}[r.IntN(2)] // the least the templates allow a hook of ours, HOOK_NAMES' too (docs/configuration.md)
		p.ExtraOwnedHook = false
		p.Env["HOOK_NAMES"] = siblingHook
	}
	p.OtherMeta = []string{`{"flush":"redis","grace":"30"}`, "flush redis then go"}[r.IntN(2)]
	if !chance(0.5) {
		return
	}
	d := &Deploy{Tool: []string{"sam", "terraform"}[r.IntN(2)], Far: chance(0.5), Two: chance(0.3)}
	d.Listed = d.Tool == "sam" && chance(0.5)
	if chance(0.4) {
		d.Hand = []string{"json", "text"}[r.IntN(2)]
	}
	at := time.Duration(60+r.IntN(300)) * time.Second
	for range r.IntN(4) {
		c := Change{At: at, What: []string{"heartbeat", "join", "untag", "heartbeat"}[r.IntN(4)]}
		d.Changes = append(d.Changes, c)
		next := time.Duration(120+r.IntN(400)) * time.Second
		switch c.What {
		case "join":
			d.Changes = append(d.Changes, Change{At: at + next, What: "leave"})
		case "untag":
			d.Changes = append(d.Changes, Change{At: at + next, What: "retag"})
		}
		at += next + time.Duration(r.IntN(200))*time.Second
	}
	slices.SortStableFunc(d.Changes, func(a, b Change) int { return int(a.At - b.At) })
	d.RemoveAt = time.Duration(41*60+r.IntN(240)) * time.Second
	if chance(0.2) {
		d.RemoveAt = time.Duration(300+r.IntN(900)) * time.Second // while the day's events run
	}
	if d.Tool == "terraform" && chance(0.3) {
		d.FailedDestroy = time.Duration(120+r.IntN(300)) * time.Second
		d.RemoveAt = max(d.RemoveAt, 47*time.Minute) // the mark is stale (30 min) before the last destroy
	}
	p.Deploy = d
	p.Env["ASG_TAG_KEY"], p.Env["ASG_TAG_VALUE"] = groupTagKey, "true"
	p.Env["CREATE_LAUNCH_HOOK"] = "true"
	p.Env["HEARTBEAT_TIMEOUT"] = strconv.Itoa(int(p.HeartbeatSecs))
	if d.Listed {
		p.Env["ASG_NAMES"] = "nodes"
	}
}

func (d *Deploy) String() string {
	if d == nil {
		return "none"
	}
	return fmt.Sprintf("%s listed=%v far=%v hand=%q two=%v changes=%v failedDestroy=%s remove=%s", d.Tool, d.Listed, d.Far, d.Hand, d.Two, d.Changes, d.FailedDestroy, d.RemoveAt)
}

// deployment is one deployment as its operator keeps it: its
// properties now, and whether its last request succeeded.
type deployment struct {
	owner     string
	heartbeat int32
	listed    []string
	installed bool // created, not removed
	removed   bool
	settled   bool // the last request succeeded
	physical  string
	// op is held by each of its stack's operations: CloudFormation (and
	// terraform's state lock) runs one at a time (a channel: a goroutine
	// waiting on it is durably blocked, so the bubble's clock moves)
	op chan struct{}
}

func (d *deployment) lock()   { d.op <- struct{}{} }
func (d *deployment) unlock() { <-d.op }

// deploys is the world's deployments and its operator.
type deploys struct {
	w       *World
	mu      sync.Mutex
	all     []*deployment
	busy    int           // requests in flight
	changed time.Duration // the last change of deployments or tags
	seq     int
	// failing names the invocation whose DeleteLifecycleHook fails (the
	// destroy that fails half-way)
	failing string
	// uninstalls: invocation id -> the hooks it deleted under an instance
	// waiting undrained ("<group>/<hook>"), to be reported (H1)
	uninstalls map[string][]string
	counts     map[string]int
	wg         sync.WaitGroup // the operator's operations running
}

func (ds *deploys) count(k string) {
	ds.mu.Lock()
	ds.counts[k]++
	ds.mu.Unlock()
}

// failsDelete reports whether inv's deletions fail (the destroy that fails half-way).
func (ds *deploys) failsDelete(inv *invocation) bool {
	if ds == nil {
		return false
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.failing != "" && inv.id == ds.failing
}

// props are a deployment's hook properties, as the template gives them.
func (ds *deploys) props(d *deployment, release bool) map[string]any {
	m := map[string]any{"TerminateHookName": "node-drainer-terminate", "LaunchHookName": "node-drainer-launch",
		"CreateTerminateHook": "true", "CreateLaunchHook": "true", "HeartbeatTimeout": strconv.Itoa(int(d.heartbeat)),
		"AsgTagKey": groupTagKey, "AsgTagValue": "true", "SweepSchedule": fmt.Sprintf("rate(%d minutes)", int(ds.w.Plan.SweepEvery/time.Minute))}
	if ds.w.Plan.Deploy.Tool == "sam" {
		names := []any{}
		for _, g := range d.listed {
			names = append(names, g)
		}
		m["AsgNames"] = names
	}
	if release {
		m["Release"] = "true"
	}
	return m
}

// request is one request of a deployment's template: its payload, and
// how its answer is read (ok: it succeeded).
func (ds *deploys) request(d *deployment, kind cfn.RequestType, release bool, old map[string]any) (payload []byte, url string) {
	ds.mu.Lock()
	ds.seq++
	n := ds.seq
	ds.mu.Unlock()
	props := ds.props(d, release)
	if ds.w.Plan.Deploy.Tool == "terraform" {
		props["NodeDrainer"] = "lifecycle-hooks"
		props["tf"] = map[string]any{"action": strings.ToLower(string(kind)), "prev_input": old}
		b, err := json.Marshal(props)
		must(err)
		return b, ""
	}
	logical := "LifecycleHooks"
	if release {
		logical = "LifecycleHooksRelease"
	}
	url = fmt.Sprintf("http://cfn.sim.invalid/%d/%s/%d", ds.w.Seed, d.owner, n)
	ev := cfn.Event{RequestType: kind, RequestID: fmt.Sprintf("req-%d", n), ResponseURL: url, ResourceType: "Custom::LifecycleHooks",
		LogicalResourceID: logical, StackID: "arn:aws:cloudformation:us-east-1:123456789012:stack/" + d.owner + "/1",
		PhysicalResourceID: d.physical, ResourceProperties: props, OldResourceProperties: old}
	if kind == cfn.RequestCreate {
		ev.PhysicalResourceID = ""
	}
	b, err := json.Marshal(ev)
	must(err)
	return b, url
}

// serve has d's function serve one request of its template, and says
// whether it succeeded (SAM: the answer's status; terraform: the error)
// and the outcome's detail.
func (ds *deploys) serve(d *deployment, what string, kind cfn.RequestType, release bool, old map[string]any) (bool, string) {
	payload, url := ds.request(d, kind, release, old)
	ds.mu.Lock()
	ds.busy++
	ds.mu.Unlock()
	defer func() {
		ds.mu.Lock()
		ds.busy--
		ds.changed = ds.w.now()
		ds.mu.Unlock()
	}()
	id := fmt.Sprintf("deploy:%s:%s", d.owner, what)
	res := <-ds.w.lambda.direct(id, payload, d.owner, func(inv *invocation) {
		if what == "failed-destroy" {
			ds.mu.Lock()
			ds.failing = inv.id
			ds.mu.Unlock()
		}
	})
	ok := res.err == nil
	if url != "" {
		status := cfnAnswers.take(url)
		ok = res.err == nil && status == cfn.StatusSuccess
	}
	ds.w.tracef("world: %s %s %s: ok=%v %s (error: %v)", d.owner, ds.w.Plan.Deploy.Tool, what, ok, res.detail, res.err)
	if kind == cfn.RequestDelete && !release {
		ds.w.inv.uninstalled(res.inv, res.detail)
	}
	return ok, res.detail
}

// cfnAnswers are the answers the function PUT on CloudFormation's
// presigned URLs (cfnTransport), by URL.
var cfnAnswers = &answers{by: map[string]cfn.StatusType{}}

type answers struct {
	mu sync.Mutex
	by map[string]cfn.StatusType
}

func (a *answers) take(url string) cfn.StatusType {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.by[url]
	delete(a.by, url)
	return s
}

// cfnTransport answers the PUTs on the presigned URLs of the world's
// CloudFormation (host cfn.sim.invalid) in memory; every other request
// goes to next.
type cfnTransport struct{ next http.RoundTripper }

func (t cfnTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != "cfn.sim.invalid" {
		return t.next.RoundTrip(r)
	}
	body, _ := io.ReadAll(r.Body)
	var resp cfn.Response
	if err := json.Unmarshal(body, &resp); err == nil {
		cfnAnswers.mu.Lock()
		cfnAnswers.by[r.URL.String()] = resp.Status
		cfnAnswers.mu.Unlock()
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewReader(nil)), Header: http.Header{}, Request: r}, nil
}

var cfnOnce sync.Once

// installCFN routes the function's answers to the world's CloudFormation.
func installCFN() {
	cfnOnce.Do(func() { http.DefaultTransport = cfnTransport{next: http.DefaultTransport} })
}
