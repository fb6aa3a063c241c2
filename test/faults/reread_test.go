package faults

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
)

// rereadScenarios: readings that must not end a drain early (issue 28,
// items 5 and 7): "not forced" is not "drained", and a list served from a
// lagging watch cache never proves a node absent.
func rereadScenarios() []scenario {
	return []scenario{
		{"terminate-restarted-not-forced", terminateRestartedNotForced},
		{"stale-cache-node-absent", staleCacheNodeAbsent},
	}
}

// terminateRestartedNotForced: the terminate hook of an instance EC2 reads
// `stopped` at first; before the abrupt path's guard reads EC2 again, the
// instance runs again, so nothing is forced. Not forced is not drained: the
// node (its kubelet alive) is drained by eviction and the hook completed
// with CONTINUE after that, never at once with the pods still running.
func terminateRestartedNotForced(x *X) {
	x.scene(sceneOpts{nodes: 2})
	x.web("web", 2, 1, -1)
	aws, awsEnv := x.awsProxy(fp.Options{Rules: []fp.Rule{{Name: "restart", Body: "Action=DescribeInstances", Fault: fp.Pass, Times: 1,
		Then: func(*http.Request, []byte, int) {
			x.must(env.SetInstanceState(context.Background(), x.target.ID, "running"))
		}}}})
	rt := x.function(60*time.Second, append(awsEnv, "DRAIN_TIMEOUT=3m", "DEADLINE_MARGIN=10s", "STOPPING_WAIT_TIMEOUT=5s")...)
	x.observe(map[string]int{"app=web": 1})
	x.hookAfterDrain = true
	payload := x.terminating("token-" + x.name)
	x.must(env.SetInstanceState(x.ctx, x.target.ID, "stopped"))
	x.drainThenComplete(rt, payload, 2*time.Minute)
	x.expect(len(aws.Requests()) >= 2, "EC2 read %d times: the scene proves nothing", len(aws.Requests()))
}

// staleCacheNodeAbsent: the node's name is not the instance's private DNS
// name (found by providerID), and every Node list served from the watch
// cache (resourceVersion=0) answers an empty list, as a cache that lags
// behind the node's registration would. Rule 8: only a read that is true
// proves a node absent: the node is found (by a paged, consistent list; the
// cache is never asked), drained, and the hook completed after that.
func staleCacheNodeAbsent(x *X) {
	x.scene(sceneOpts{nodes: 2, noNode: map[int]bool{0: true}})
	_, err := env.AddNode(x.ctx, harness.NodeSpec{Name: "custom-" + x.target.ID, InstanceID: x.target.ID, Zone: x.target.Zone,
		Labels: map[string]string{"pool": x.name}})
	x.must(err)
	x.target.PrivateDNSName = "custom-" + x.target.ID // the scene's helpers place pods by node name
	x.web("web", 2, 1, -1)
	api, apiEnv := x.apiProxy(fp.Options{Rules: []fp.Rule{{Name: "stale cache", Method: "GET", Path: regexp.MustCompile(`^/api/v1/nodes$`),
		Query: "resourceVersion=0", Fault: fp.Answer,
		Reply: `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`}}})
	rt := x.function(60*time.Second, apiEnv, "DRAIN_TIMEOUT=3m", "DEADLINE_MARGIN=10s")
	x.observe(map[string]int{"app=web": 1})
	x.hookAfterDrain = true
	x.drainThenComplete(rt, x.terminating("token-"+x.name), 2*time.Minute)
	stale, paged := 0, 0
	for _, r := range api.Requests() {
		if r.Fault == fp.Answer {
			stale++
		}
		if r.Method == "GET" && r.Path == "/api/v1/nodes" && strings.Contains(r.Query, "limit=") {
			paged++
		}
	}
	// the search by providerID never asks the watch cache: a stale cache
	// cannot hide the node, by construction
	x.expect(stale == 0, "%d Node list(s) asked of the watch cache (resourceVersion=0), which a lag makes lie", stale)
	x.expect(paged > 0, "no paged Node list: the node was not looked for by providerID, the scene proves nothing")
}
