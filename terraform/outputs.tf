output "function_arn" {
  description = "The node-drainer function."
  value       = aws_lambda_function.this.arn
}

output "function_name" {
  description = "The node-drainer function's name."
  value       = aws_lambda_function.this.function_name
}

output "role_arn" {
  description = "The function's role; map it to the Kubernetes group node-drainer (access entry or aws-auth)."
  value       = aws_iam_role.function.arn
}

output "dead_letter_queue_url" {
  description = "Events that failed delivery or all invocation attempts."
  value       = aws_sqs_queue.dlq.id
}

output "dead_letter_queue_arn" {
  description = "ARN of the dead-letter queue."
  value       = aws_sqs_queue.dlq.arn
}

output "rule_names" {
  description = "The EventBridge rules that invoke the function, the sweep's schedule included."
  value       = [for rule in local.all_rules : rule.name]
}

output "aws_auth_map_roles_entry" {
  description = "For clusters without access entries, the mapRoles item for the aws-auth ConfigMap."
  value = yamlencode([{
    rolearn  = aws_iam_role.function.arn
    username = "node-drainer"
    groups   = ["node-drainer"]
  }])
}

output "rbac" {
  description = "What the cluster's RBAC follows: pass lease_namespace and delete_terminated_nodes to the submodule modules/rbac (or apply kubernetes/*.yaml as they say)."
  value = {
    lease_namespace         = var.lease_namespace
    delete_terminated_nodes = var.delete_terminated_nodes
  }
}
