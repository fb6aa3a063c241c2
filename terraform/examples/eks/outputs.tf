output "function_arn" {
  description = "The node-drainer function."
  value       = module.node_drainer.function_arn
}

output "role_arn" {
  description = "The function's role."
  value       = module.node_drainer.role_arn
}

output "dead_letter_queue_url" {
  description = "Failed events."
  value       = module.node_drainer.dead_letter_queue_url
}

output "rule_names" {
  description = "The EventBridge rules."
  value       = module.node_drainer.rule_names
}
