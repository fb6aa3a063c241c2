variable "region" {
  description = "Region of the cluster and the node group."
  type        = string
}

variable "cluster_name" {
  description = "Name of the EKS cluster the nodes join."
  type        = string
}

variable "function_name" {
  description = "The node-drainer function's name (and the prefix of its rules, queue and alarms)."
  type        = string
  default     = "node-drainer"
}

variable "name_prefix" {
  description = "Prefix of the launch template's and the Auto Scaling group's generated names."
  type        = string
  default     = "nodes"
}

variable "image_id" {
  description = "AMI of the nodes (an EKS-optimized AMI of the cluster's Kubernetes version)."
  type        = string
}

variable "instance_type" {
  description = "Instance type of the nodes."
  type        = string
  default     = "m5.large"
}

variable "desired_size" {
  description = "Instances in the group."
  type        = number
  default     = 2
}

variable "subnet_ids" {
  description = "Subnets of the node group."
  type        = list(string)
}

variable "dry_run" {
  description = "Start node-drainer in dry-run mode: log what would be done, change nothing."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for the node group, its instances and node-drainer's resources."
  type        = map(string)
  default     = {}
}
