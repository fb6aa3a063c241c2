# node-drainer on an existing EKS cluster whose authentication mode allows
# access entries (API or API_AND_CONFIG_MAP). Build the package first:
#   make package            # -> dist/node-drainer-arm64.zip
#   cd terraform/examples/eks
#   terraform init && terraform apply -var cluster_name=my-cluster -var 'asg_names=["my-nodes-a","my-nodes-b"]'

provider "aws" {
  region = var.region
}

# The cluster exists already: the kubernetes provider is configured from it at
# plan time, which the RBAC submodule's kubernetes_manifest needs (the
# node-drainer module itself needs no cluster to plan).
data "aws_eks_cluster" "this" {
  name = var.cluster_name
}

# Token from the AWS CLI (`aws eks get-token`) on the machine running terraform.
provider "kubernetes" {
  host                   = data.aws_eks_cluster.this.endpoint
  cluster_ca_certificate = base64decode(data.aws_eks_cluster.this.certificate_authority[0].data)

  exec {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "aws"
    args        = ["eks", "get-token", "--cluster-name", var.cluster_name, "--region", var.region]
  }
}

module "node_drainer" {
  source = "../.."

  cluster_name = var.cluster_name
  asg_names    = var.asg_names
  package_path = "${path.module}/../../../dist/node-drainer-arm64.zip"

  # EKS access entry for the function's role -> Kubernetes group node-drainer
  # (the RBAC below binds that group).
  create_access_entry = true

  dry_run = var.dry_run

  # The sweep runs on sweep_schedule (default "rate(5 minutes)"; null disables
  # it) and only reports zombie nodes; zombie_action = "replace" has their ASG
  # replace them (grants autoscaling:SetInstanceHealth on asg_names).
  # zombie_action = "replace"
}

# The cluster's RBAC, following the function's configuration (the lease
# namespace; nodes: delete only with delete_terminated_nodes).
module "node_drainer_rbac" {
  source = "../../modules/rbac"

  lease_namespace         = module.node_drainer.rbac.lease_namespace
  delete_terminated_nodes = module.node_drainer.rbac.delete_terminated_nodes
}

# From a release whose module applied the RBAC itself (manage_rbac = true):
# the same objects, now the submodule's; without these, terraform would
# delete them and create them again.
moved {
  from = module.node_drainer.kubernetes_manifest.rbac_namespace
  to   = module.node_drainer_rbac.kubernetes_manifest.rbac_namespace
}

moved {
  from = module.node_drainer.kubernetes_manifest.rbac
  to   = module.node_drainer_rbac.kubernetes_manifest.rbac
}
