terraform {
  # moved blocks, optional object attributes
  required_version = ">= 1.5.0"

  required_providers {
    # Configure it in the calling module, from a cluster that exists at plan time.
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.23"
    }
  }
}
