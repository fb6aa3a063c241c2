variable "region" {
  description = "Region of the cluster."
  type        = string
}

variable "cluster_name" {
  description = "Name of the EKS cluster."
  type        = string
}

variable "asg_names" {
  description = "The cluster's node Auto Scaling groups."
  type        = list(string)
}

variable "dry_run" {
  description = "Start in dry-run mode: log what would be done, change nothing."
  type        = bool
  default     = false
}
