# A node group and node-drainer in ONE `terraform apply`: the Auto Scaling
# group is named by name_prefix (as terraform-aws-eks's self-managed node
# groups are), so its name is known only after apply, and node-drainer is
# given it all the same. The module keys its lifecycle hooks by position in
# asg_names, not by name, and needs no kubernetes provider to plan, so nothing
# here needs the cluster or the group to exist before the plan.
#
#   make package            # -> dist/node-drainer-arm64.zip
#   cd terraform/examples/asg-name-prefix
#   terraform init
#   terraform apply -var region=eu-west-1 -var cluster_name=prod \
#     -var image_id=ami-... -var 'subnet_ids=["subnet-...","subnet-..."]'
#
# The cluster's RBAC is not applied here: apply ../../kubernetes/*.yaml with
# kubectl, or call ../../modules/rbac from a configuration whose kubernetes
# provider is configured from the existing cluster (see ../eks).

provider "aws" {
  region = var.region
}

resource "aws_launch_template" "nodes" {
  name_prefix   = "${var.name_prefix}-"
  image_id      = var.image_id
  instance_type = var.instance_type
  tags          = var.tags
}

resource "aws_autoscaling_group" "nodes" {
  # the name is generated at apply: "<name_prefix>-<timestamp and counter>"
  name_prefix         = "${var.name_prefix}-"
  min_size            = 0
  max_size            = var.desired_size + 1
  desired_capacity    = var.desired_size
  vpc_zone_identifier = var.subnet_ids

  launch_template {
    id      = aws_launch_template.nodes.id
    version = aws_launch_template.nodes.latest_version
  }

  # node-drainer acts only on instances that carry the cluster's tag
  # (cluster_tag_key; by default kubernetes.io/cluster/<cluster_name>)
  tag {
    key                 = "kubernetes.io/cluster/${var.cluster_name}"
    value               = "owned"
    propagate_at_launch = true
  }

  dynamic "tag" {
    for_each = var.tags
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }
}

module "node_drainer" {
  source = "../.."

  function_name = var.function_name
  cluster_name  = var.cluster_name
  # unknown until the group is created: fine, the hooks are keyed by position
  asg_names    = [aws_autoscaling_group.nodes.name]
  package_path = "${path.module}/../../../dist/node-drainer-arm64.zip"

  # EKS access entry: the function's role -> Kubernetes group node-drainer
  create_access_entry = true

  dry_run = var.dry_run
  tags    = var.tags
}
