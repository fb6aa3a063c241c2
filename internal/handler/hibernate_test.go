package handler

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/node"
)

// hibernatedEC2 is fakeEC2 whose stopping and stopped instances were
// hibernated: EC2 gives the state reason of a hibernation.
type hibernatedEC2 struct{ *fakeEC2 }

func (h hibernatedEC2) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	out, err := h.fakeEC2.DescribeInstances(ctx, in, opts...)
	if out != nil {
		for _, r := range out.Reservations {
			for i := range r.Instances {
				if s := r.Instances[i].State; s != nil && (s.Name == types.InstanceStateNameStopped || s.Name == types.InstanceStateNameStopping) {
					r.Instances[i].StateReason = &types.StateReason{Code: aws.String(instance.ReasonUserHibernate),
						Message: aws.String("Client.UserInitiatedHibernate: User initiated hibernate")}
				}
			}
		}
	}
	return out, err
}

// TestHibernatedStopIsNotForced: a stopped instance that was hibernated
// resumes with its RAM — its processes, with the volumes they had mounted.
// Its node gets no out-of-service taint, its pods are not force-deleted and
// its attachments stay, on the state-change path and in the sweep alike;
// the not-forced Event says why.
func TestHibernatedStopIsNotForced(t *testing.T) {
	for _, via := range []string{"state change", "sweep"} {
		t.Run(via, func(t *testing.T) {
			e := newEnv(newNode(idA, notReadySince(time.Now().Add(-time.Hour))), pod(idA, "apps", "db-0", "data"),
				claim("apps", "data", "pv-1"), attachment("csi-1", idA, "pv-1"))
			e.ec2.readings[idA] = []reading{{state: instance.StateStopped, tagged: true}}
			h := e.handlerOn(hibernatedEC2{e.ec2}, func() time.Time { return e.now })
			payload := stateEvent(idA, "stopped", time.Now())
			if via == "sweep" {
				payload = sweepEvent()
			}
			out, err := e.handleWith(h, payload, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !e.podExists("apps", "db-0") {
				t.Error("the pod of a hibernated instance was force-deleted")
			}
			if _, err := e.kube.StorageV1().VolumeAttachments().Get(context.Background(), "csi-1", metav1.GetOptions{}); err != nil {
				t.Errorf("attachment of a hibernated instance: %v, want kept", err)
			}
			if n := e.node(t, idA); node.HasTaint(n, node.TaintOutOfService) {
				t.Error("a hibernated instance's node was tainted out-of-service")
			}
			switch via {
			case "state change":
				if out.Action != ActionNotForced || !strings.Contains(out.Detail, "hibernated") {
					t.Errorf("outcome %s %q: want not forced, saying the instance is hibernated", out.Action, out.Detail)
				}
				if e.events(t)[string(node.ReasonNotForced)] != "Warning" {
					t.Errorf("events %v: want a NotForced Warning on the node", e.events(t))
				}
			case "sweep":
				if len(out.Sweep.Dead) != 0 || !slices.ContainsFunc(out.Sweep.Notes, func(n string) bool { return strings.Contains(n, "hibernated") }) {
					t.Errorf("sweep %+v: want nothing released, a note saying the instance is hibernated", out.Sweep)
				}
			}
		})
	}
}
