output "asg_name" {
  description = "The node group's generated name."
  value       = aws_autoscaling_group.nodes.name
}

output "function_arn" {
  description = "The node-drainer function."
  value       = module.node_drainer.function_arn
}

output "role_arn" {
  description = "The function's role."
  value       = module.node_drainer.role_arn
}

output "rbac" {
  description = "What the cluster's RBAC must follow (modules/rbac's inputs)."
  value       = module.node_drainer.rbac
}
