terraform {
  # startswith(), lifecycle preconditions, optional object attributes.
  required_version = ">= 1.5.0"

  required_providers {
    # 6.0: data.aws_region.region; aws_eks_access_entry and Lambda logging_config.
    # No kubernetes provider: the cluster's RBAC is the submodule modules/rbac,
    # so planning this module needs no cluster.
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0"
    }
  }
}
