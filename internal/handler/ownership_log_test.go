package handler

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/logging"
)

// An action left for a retry (EC2 unreadable, a group ours by its tag
// alone, no node of the instance here) is logged as left for a retry, not
// as drained: nothing is drained on that path (verdictNoNodeRetry).
func TestNoNodeRetryLoggedAsLeft(t *testing.T) {
	e := newEnv()
	tagMode(e)
	e.ec2.readings[idA] = []reading{throttled}
	e.asg.groups = []astypes.AutoScalingGroup{taggedGroup(asgName, "true")}
	out := &syncBuffer{}
	h := New(e.cfg, Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg}, logging.New(out, "JSON", slog.LevelDebug),
		WithClock(newMovingClock(func() time.Time { return e.now })))
	if _, err := e.handleWith(h, terminateEvent(idA), 2*time.Second); err == nil {
		t.Fatal("no error: want the action left for a retry")
	}
	var left bool
	for _, l := range out.lines() {
		if bytes.Contains(l, []byte("draining gracefully")) {
			t.Errorf("logged %s; nothing is drained on this path", l)
		}
		left = left || bytes.Contains(l, []byte(`"message":"EC2 unreadable and no node of the instance here, in a group ours by its tag alone: heartbeated, left for a retry"`))
	}
	if !left {
		t.Errorf("no line saying the action is left for a retry in\n%s", bytes.Join(out.lines(), []byte("\n")))
	}
}
