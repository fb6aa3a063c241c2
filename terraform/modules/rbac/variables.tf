variable "create" {
  description = "Create the RBAC objects; false = this module creates nothing (the objects are applied some other way, say kubectl)."
  type        = bool
  default     = true
}

variable "lease_namespace" {
  description = "Namespace of the function's per-instance Leases: the node-drainer module's output rbac.lease_namespace. The module creates it, with kubernetes/rbac-lease-namespace.yaml's Role and RoleBinding in it."
  type        = string
  default     = "node-drainer"

  validation {
    # as the node-drainer module's lease_namespace
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.lease_namespace)) && !contains(["default", "kube-system", "kube-public", "kube-node-lease"], var.lease_namespace)
    error_message = "lease_namespace must be a DNS label (lower-case letters, digits, '-'), not default, kube-system, kube-public or kube-node-lease."
  }
}

variable "delete_terminated_nodes" {
  description = "The node-drainer module's output rbac.delete_terminated_nodes: only when true is nodes: delete granted (kubernetes/rbac-delete-nodes.yaml)."
  type        = bool
  default     = false
}
