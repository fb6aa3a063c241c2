# node-drainer's Kubernetes RBAC, as the node-drainer module's configuration
# says (see ../../kubernetes/*.yaml): rbac.yaml (the ClusterRole and its
# binding to the group node-drainer, the kubelet Leases' Role in
# kube-node-lease, the FlowSchema and PriorityLevelConfiguration); the
# namespace lease_namespace with rbac-lease-namespace.yaml's Role and
# RoleBinding in it; and rbac-delete-nodes.yaml only with
# delete_terminated_nodes. One manifest per YAML document, keyed by kind and
# name.
#
# A module of its own, so that the node-drainer module needs no kubernetes
# provider and no cluster at plan time: kubernetes_manifest reads the
# cluster's API while planning, so the cluster must exist before this module
# is planned (see ../../README.md, "The cluster's RBAC"). Feed it the
# node-drainer module's outputs lease_namespace and delete_terminated_nodes,
# and the RBAC follows the function's configuration.
locals {
  rbac_texts = {
    for name in ["rbac.yaml", "rbac-lease-namespace.yaml", "rbac-delete-nodes.yaml"] :
    name => [for text in split("\n---", file("${path.module}/../../kubernetes/${name}")) : text if try(yamldecode(text).kind, null) != null]
  }
  # three lists, not one conditional: the documents differ in shape, and a
  # conditional's two sides must have consistent types (terraform plan fails)
  rbac_cluster_documents = [for text in local.rbac_texts["rbac.yaml"] : yamldecode(text)]
  rbac_lease_documents = [
    for text in local.rbac_texts["rbac-lease-namespace.yaml"] :
    merge(yamldecode(text), { metadata = merge(yamldecode(text).metadata, { namespace = var.lease_namespace }) })
  ]
  rbac_delete_documents = [for text in local.rbac_texts["rbac-delete-nodes.yaml"] : yamldecode(text) if var.delete_terminated_nodes]
  rbac_documents = {
    for doc in concat(local.rbac_cluster_documents, local.rbac_lease_documents, local.rbac_delete_documents) :
    "${doc.kind}/${doc.metadata.name}" => doc
  }
}

# The namespace first: the Role and RoleBinding in it fail with "namespaces not
# found" when applied alongside it.
resource "kubernetes_manifest" "rbac_namespace" {
  # keyed as the document it was before (kind/name): the same state address
  for_each = { for ns in [var.lease_namespace] : "Namespace/${ns}" => ns if var.create }

  manifest = {
    apiVersion = "v1"
    kind       = "Namespace"
    metadata = {
      name   = each.value
      labels = { "app.kubernetes.io/name" = "node-drainer" }
    }
  }
}

resource "kubernetes_manifest" "rbac" {
  # a for expression, not `create ? documents : {}`: the documents differ in
  # shape, so rbac_documents is an object and the conditional's two sides have
  # inconsistent types (terraform plan fails)
  for_each = { for key, doc in local.rbac_documents : key => doc if var.create }

  manifest = each.value

  depends_on = [kubernetes_manifest.rbac_namespace]
}

# The Namespace was one of rbac_documents before it had a resource of its own.
moved {
  from = kubernetes_manifest.rbac["Namespace/node-drainer"]
  to   = kubernetes_manifest.rbac_namespace["Namespace/node-drainer"]
}
