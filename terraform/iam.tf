# The function's role: least privilege, no wildcard actions. The same actions
# as FunctionRole and ListedGroupsPolicy of template.yaml (but its
# ListedGroupHooks: terraform creates the listed groups' hooks itself).

locals {
  asg_arns = [
    for name in var.asg_names :
    "arn:${local.partition}:autoscaling:${local.region}:${local.account}:autoScalingGroup:*:autoScalingGroupName/${name}"
  ]

  kubeconfig_parameter_arn = (
    startswith(var.kubeconfig_ssm_parameter, "arn:")
    ? var.kubeconfig_ssm_parameter
    : "arn:${local.partition}:ssm:${local.region}:${local.account}:parameter${startswith(var.kubeconfig_ssm_parameter, "/") ? "" : "/"}${var.kubeconfig_ssm_parameter}"
  )

  # a secret's ARN ends in -<6 random characters>
  kubeconfig_secret_arn = (
    startswith(var.kubeconfig_secret_id, "arn:")
    ? var.kubeconfig_secret_id
    : "arn:${local.partition}:secretsmanager:${local.region}:${local.account}:secret:${var.kubeconfig_secret_id}-??????"
  )
}

data "aws_iam_policy_document" "assume" {
  statement {
    effect  = "Allow"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "function" {
  name_prefix          = substr("${var.function_name}-", 0, 38)
  path                 = var.role_path
  permissions_boundary = var.role_permissions_boundary == "" ? null : var.role_permissions_boundary
  description          = "node-drainer function ${var.function_name}"
  assume_role_policy   = data.aws_iam_policy_document.assume.json
  tags                 = var.tags
}

data "aws_iam_policy_document" "function" {
  statement {
    sid       = "Logs"
    effect    = "Allow"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.function.arn}:*"]
  }

  # Complete / heartbeat lifecycle actions, only on the listed ASGs (the
  # tagged ones: discovery.tf).
  dynamic "statement" {
    for_each = length(var.asg_names) > 0 ? [1] : []
    content {
      sid       = "LifecycleAction"
      effect    = "Allow"
      actions   = ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"]
      resources = local.asg_arns
    }
  }

  # The sweep marks a zombie node's instance Unhealthy (zombie_action replace only).
  dynamic "statement" {
    for_each = var.zombie_action == "replace" && length(var.asg_names) > 0 ? [1] : []
    content {
      sid       = "InstanceHealth"
      effect    = "Allow"
      actions   = ["autoscaling:SetInstanceHealth"]
      resources = local.asg_arns
    }
  }

  # Instance state confirmation and cluster-tag check; this action has no resource types.
  statement {
    sid       = "DescribeInstances"
    effect    = "Allow"
    actions   = ["ec2:DescribeInstances"]
    resources = ["*"]
  }

  # The hook's HeartbeatTimeout, to heartbeat at half of it; this action has no
  # resource types or condition keys, so it cannot be scoped to the listed ASGs.
  statement {
    sid       = "DescribeLifecycleHooks"
    effect    = "Allow"
    actions   = ["autoscaling:DescribeLifecycleHooks"]
    resources = ["*"]
  }

  # The sweep reads the listed groups' instances and lifecycle states (and those
  # of their warm pools, which DescribeAutoScalingGroups does not list), and
  # group_policy_tags a group's policy tags; these actions have no resource
  # types, so they cannot be scoped to the listed ASGs.
  statement {
    sid       = "DescribeAutoScalingGroups"
    effect    = "Allow"
    actions   = ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeWarmPool"]
    resources = ["*"]
  }

  dynamic "statement" {
    for_each = var.cluster_mode == "eks" ? [1] : []
    content {
      sid       = "DescribeCluster"
      effect    = "Allow"
      actions   = ["eks:DescribeCluster"]
      resources = ["arn:${local.partition}:eks:${local.region}:${local.account}:cluster/${var.cluster_name}"]
    }
  }

  # Self-continuation of long drains and the sweep's shards.
  dynamic "statement" {
    for_each = var.continue_long_drains || var.sweep_shard_nodes > 0 ? [1] : []
    content {
      sid       = "ContinueDrain"
      effect    = "Allow"
      actions   = ["lambda:InvokeFunction"]
      resources = [local.function_arn]
    }
  }

  # outcome events, on the one bus named (outcome_event_bus only)
  dynamic "statement" {
    for_each = var.outcome_event_bus != "" ? [1] : []
    content {
      sid       = "OutcomeEvents"
      effect    = "Allow"
      actions   = ["events:PutEvents"]
      resources = ["arn:${local.partition}:events:${local.region}:${local.account}:event-bus/${var.outcome_event_bus}"]
    }
  }

  statement {
    sid       = "DeadLetters"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.dlq.arn]
  }

  # Lambda sends failed invocations to a queue encrypted with a customer key
  # only with this key's data keys (dead_letter_queue_kms_key_arn only).
  dynamic "statement" {
    for_each = var.dead_letter_queue_kms_key_arn != "" ? [1] : []
    content {
      sid       = "DeadLetterKey"
      effect    = "Allow"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [var.dead_letter_queue_kms_key_arn]
    }
  }

  dynamic "statement" {
    for_each = var.kubeconfig_ssm_parameter != "" ? [1] : []
    content {
      sid       = "KubeconfigParameter"
      effect    = "Allow"
      actions   = ["ssm:GetParameter"]
      resources = [local.kubeconfig_parameter_arn]
    }
  }

  dynamic "statement" {
    for_each = var.kubeconfig_secret_id != "" ? [1] : []
    content {
      sid       = "KubeconfigSecret"
      effect    = "Allow"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [local.kubeconfig_secret_arn]
    }
  }
}

resource "aws_iam_role_policy" "function" {
  name   = "node-drainer"
  role   = aws_iam_role.function.id
  policy = data.aws_iam_policy_document.function.json
}

resource "aws_iam_role_policy_attachment" "vpc" {
  count = local.has_vpc ? 1 : 0

  role       = aws_iam_role.function.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"
}

# EventBridge delivers to the DLQ with its own service principal, limited to our rules.
data "aws_iam_policy_document" "dlq" {
  statement {
    sid       = "EventBridgeRuleDeadLetters"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.dlq.arn]

    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${local.partition}:events:${local.region}:${local.account}:rule/${var.function_name}-*"]
    }
  }
}

resource "aws_sqs_queue_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.id
  policy    = data.aws_iam_policy_document.dlq.json
}
