output "objects" {
  description = "The objects created, as Kind/name (the Role and RoleBinding in lease_namespace, the rest cluster-scoped or in kube-node-lease)."
  value       = sort(concat(keys(kubernetes_manifest.rbac_namespace), keys(kubernetes_manifest.rbac)))
}
