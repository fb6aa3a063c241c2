package install

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// terraform_compose: terraform/examples/asg-name-prefix, unchanged but for the
// override file pointing its provider at the emulator. The plan must leave
// the Auto Scaling group's name unknown (name_prefix: generated at apply,
// as terraform-aws-eks's self-managed node groups' are) while it plans the
// module's lifecycle hook on that group; ONE `terraform apply` of that plan
// creates the launch template, the group and node-drainer. Then the group's
// instances get their (kwok) nodes, the function drains one of them as
// terraform's path does (readBack, drainWith), and `terraform destroy`
// leaves nothing. The example applies no RBAC (it has no kubernetes
// provider): the harness's, in the module's default lease namespace, is what
// the function runs under.

// composePrefix is the example's name_prefix; composeFunction its
// function_name (no prefix shared with the paths' node-drainer or the
// upgrade's nd-upgrade).
const (
	composePrefix   = "compose-nodes"
	composeFunction = "nd-compose"
)

// composeOverride is what the override file adds to the example besides the
// provider, for the emulator's sake:
//   - wait_for_capacity_timeout 0: the group is not waited on until its
//     instances are in service, because that wait asks ELB about the group's
//     load balancers, a service the tools cache's provider is built without
//     (hack/tools/providers.sh); the emulator's instances run at once anyway;
//   - force_delete: destroy deletes the group with its instances at once.
//     Without it the provider scales the group to 0 and waits for its
//     instances to go, and the emulator left the group's instance InService
//     at desired capacity 0 (measured: destroy still waiting after 12 min).
const composeOverride = `
resource "aws_autoscaling_group" "nodes" {
  wait_for_capacity_timeout = "0"
  force_delete              = true
}
`

func terraformCompose(t *testing.T) {
	step(t, "terraform_compose", func(t *testing.T) string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		// the harness's RBAC (terraform's path put it back), which the
		// example leaves to the cluster's admin
		if err := env.ApplyRBAC(ctx); err != nil {
			t.Fatal(err)
		}
		subnet := zoneSubnet(t, ctx, harness.Zone)
		tf := newTerraformRoot(t, ctx, tfSetup{example: "asg-name-prefix", vars: []string{
			"function_name=" + composeFunction, "name_prefix=" + composePrefix,
			"image_id=ami-12c6146b", `subnet_ids=["` + subnet + `"]`,
		}, override: composeOverride})
		destroyed := false
		defer func() {
			if !destroyed {
				if err := tf.run(ctx, "destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
					t.Logf("terraform destroy after a failure: %v", err)
				}
			}
		}()
		if err := tf.run(ctx, "init", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		const planFile = "compose.tfplan"
		if err := tf.run(ctx, "plan", "-input=false", "-no-color", "-out="+planFile); err != nil {
			t.Fatal(err)
		}
		checkNameUnknownAtPlan(t, ctx, tf, planFile)
		if err := tf.run(ctx, "apply", "-input=false", "-no-color", planFile); err != nil {
			t.Fatal(err)
		}

		asg, err := tf.output(ctx, "asg_name")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(asg, composePrefix+"-") || len(asg) <= len(composePrefix)+1 {
			t.Fatalf("the group's name %q is not generated from the prefix %s-", asg, composePrefix)
		}
		tf.asgs = []string{asg}
		_, fn := tf.readBack(t, ctx)
		if t.Failed() {
			return ""
		}

		// the group's instances become nodes of the cluster
		insts, err := env.ASGInstances(ctx, asg)
		if err != nil {
			t.Fatal(err)
		}
		if len(insts) < 2 {
			t.Fatalf("the group %s has %d instances, want 2 (the drain moves pods to the other)", asg, len(insts))
		}
		for _, i := range insts {
			if err := env.AddNodeFor(ctx, i, map[string]string{"pool": asg}); err != nil {
				t.Fatal(err)
			}
		}
		if err := env.Namespace(ctx, asg); err != nil {
			t.Fatal(err)
		}
		drainWith(t, ctx, &drainScene{ASG: asg, Instances: insts, Namespace: asg}, fn)
		if t.Failed() {
			return ""
		}

		destroyed = true
		if err := tf.run(ctx, "destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
			t.Fatal(err)
		}
		out, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).DescribeAutoScalingGroups(ctx,
			&autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{asg}})
		if err != nil || len(out.AutoScalingGroups) != 0 {
			t.Errorf("the group %s after destroy: %v %+v", asg, err, out)
		}
		tf.asgs = nil // gone with their hooks
		tf.assertNothingLeft(t, ctx, fn)
		return ""
	})
}

// checkNameUnknownAtPlan fails t unless the saved plan creates the group with
// its name unknown and plans one terminate hook whose group is that unknown
// name: what made `for_each = toset(var.asg_names)` fail to plan.
func checkNameUnknownAtPlan(t *testing.T, ctx context.Context, tf *terraformRoot, planFile string) {
	t.Helper()
	b, err := tf.stdout(ctx, "show", "-json", planFile)
	if err != nil {
		t.Fatal(err)
	}
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Mode    string `json:"mode"`
			Change  struct {
				Actions      []string        `json:"actions"`
				AfterUnknown map[string]any  `json:"after_unknown"`
				After        json.RawMessage `json:"after"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal(b, &plan); err != nil {
		t.Fatal(err)
	}
	unknown := map[string]bool{}
	for _, rc := range plan.ResourceChanges {
		if rc.Mode == "data" {
			continue // read at plan or apply
		}
		if strings.Join(rc.Change.Actions, ",") != "create" {
			t.Errorf("%s: planned %v, want create (a first apply)", rc.Address, rc.Change.Actions)
		}
		switch rc.Address {
		case "aws_autoscaling_group.nodes":
			unknown["group name"] = rc.Change.AfterUnknown["name"] == true
		case "module.node_drainer.aws_autoscaling_lifecycle_hook.terminate[0]":
			unknown["hook's group"] = rc.Change.AfterUnknown["autoscaling_group_name"] == true
		}
	}
	for _, what := range []string{"group name", "hook's group"} {
		if v, planned := unknown[what]; !planned || !v {
			t.Errorf("the plan: %s planned %t, unknown %t; want it planned and unknown", what, planned, v)
		}
	}
}

// zoneSubnet is the emulator's default subnet in zone.
func zoneSubnet(t *testing.T, ctx context.Context, zone string) string {
	t.Helper()
	out, err := ec2.NewFromConfig(env.AWS.AWSConfig(), func(o *ec2.Options) { o.Region = moto.Region }).DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{
		Filters: []ec2types.Filter{
			{Name: aws.String("availability-zone"), Values: []string{zone}},
			{Name: aws.String("default-for-az"), Values: []string{"true"}},
		},
	})
	if err != nil || len(out.Subnets) == 0 {
		t.Fatalf("the default subnet of %s: %v %+v", zone, err, out)
	}
	return aws.ToString(out.Subnets[0].SubnetId)
}
