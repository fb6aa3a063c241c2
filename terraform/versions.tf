terraform {
  # startswith(), lifecycle preconditions, optional object attributes.
  required_version = ">= 1.5.0"

  required_providers {
    # 6.0: data.aws_region.region; aws_eks_access_entry and Lambda logging_config.
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0"
    }
    # Only called when manage_rbac = true (kubernetes_manifest); terraform init
    # still installs it. Configure it in the calling module (see README.md).
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.23"
    }
  }
}
