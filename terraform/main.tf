# node-drainer: the same function, rules, hooks, queue and permissions as the
# SAM template (template.yaml); test/deploy's test keeps the two in step.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  partition = data.aws_partition.current.partition
  region    = data.aws_region.current.region
  account   = data.aws_caller_identity.current.account_id

  # The function's own ARN, built from its name so the role does not depend on the function.
  function_arn = "arn:${local.partition}:lambda:${local.region}:${local.account}:function:${var.function_name}"

  has_vpc = length(var.subnet_ids) > 0

  # The code: an object in S3, or a local zip (by default the one `make
  # package` builds for the architecture).
  from_s3      = var.s3_bucket != ""
  package_path = coalesce(var.package_path, "dist/node-drainer-${var.architecture == "x86_64" ? "amd64" : "arm64"}.zip")

  # The function's configuration contract (internal/config reads these).
  environment = {
    CLUSTER_NAME                = var.cluster_name
    CLUSTER_ENDPOINT            = var.cluster_endpoint
    CLUSTER_CA_DATA             = var.cluster_ca_data
    KUBECONFIG_SSM_PARAMETER    = var.kubeconfig_ssm_parameter
    KUBECONFIG_SECRET_ID        = var.kubeconfig_secret_id
    ASG_NAMES                   = join(",", var.asg_names)
    CLUSTER_TAG_KEY             = var.cluster_tag_key
    ASG_TAG_KEY                 = var.asg_tag_key
    ASG_TAG_VALUE               = var.asg_tag_value
    CREATE_TERMINATE_HOOK       = tostring(var.create_terminate_hook)
    CREATE_LAUNCH_HOOK          = tostring(var.create_launch_hook)
    HEARTBEAT_TIMEOUT           = tostring(var.heartbeat_timeout)
    DRY_RUN                     = tostring(var.dry_run)
    DRAIN_TIMEOUT               = var.drain_timeout
    SPOT_DRAIN_TIMEOUT          = var.spot_drain_timeout
    SPOT_GRACE_PERIOD_CAP       = var.spot_grace_period_cap
    CRITICAL_PRIORITY_THRESHOLD = tostring(var.critical_priority_threshold)
    REBALANCE_ACTION            = var.rebalance_action
    SCHEDULED_CHANGE_ACTION     = var.scheduled_change_action
    SCHEDULED_CHANGE_LEAD_TIME  = var.scheduled_change_lead_time
    LIFECYCLE_RESULT_ON_FAILURE = var.lifecycle_result_on_failure
    EVICT_UNMANAGED_PODS        = tostring(var.evict_unmanaged_pods)
    POD_POLICY                  = var.pod_policy
    VOLUME_DETACH_TIMEOUT       = var.volume_detach_timeout
    STOPPING_WAIT_TIMEOUT       = var.stopping_wait_timeout
    OUT_OF_SERVICE_TAINT        = tostring(var.out_of_service_taint)
    DELETE_TERMINATED_NODES     = tostring(var.delete_terminated_nodes)
    BATCH_CORDON                = tostring(var.batch_cordon)
    NODE_CONDITIONS             = tostring(var.node_conditions)
    KUBE_CLIENT_QPS             = tostring(var.kube_client_qps)
    KUBE_CLIENT_BURST           = tostring(var.kube_client_burst)
    DEADLINE_MARGIN             = var.deadline_margin
    OUTCOME_EVENT_BUS           = var.outcome_event_bus
    OUTCOME_BLOCKED_AFTER       = var.outcome_blocked_after
    CONTINUE_LONG_DRAINS        = tostring(var.continue_long_drains)
    MAX_CONTINUATIONS           = tostring(var.max_continuations)
    HOOK_NAMES                  = join(",", var.hook_names)
    TERMINATE_HOOK_NAME         = var.terminate_hook_name
    LAUNCH_HOOK_NAME            = var.launch_hook_name
    ADVISORY_MARK_TTL           = var.advisory_mark_ttl
    GROUP_POLICY_TAGS           = tostring(var.group_policy_tags)
    LB_DRAIN_WAIT               = var.lb_drain_wait
    SKIP_NODES_OWNED_BY         = length(var.skip_nodes_owned_by) == 0 ? "none" : join(",", var.skip_nodes_owned_by)
    DEAD_NODE_EVICTION_WINDOW   = var.dead_node_eviction_window
    NODE_LEASE_STALE_AFTER      = var.node_lease_stale_after
    LEASE_NAMESPACE             = var.lease_namespace
    ZOMBIE_AFTER                = var.zombie_after
    ZOMBIE_ACTION               = var.zombie_action
    ZOMBIE_MAX_PER_SWEEP        = tostring(var.zombie_max_per_sweep)
    ZOMBIE_MAX_ASG_SHARE        = tostring(var.zombie_max_asg_share)
    SWEEP_SHARD_NODES           = tostring(var.sweep_shard_nodes)
    LOG_LEVEL                   = var.log_level
  }
}

resource "aws_cloudwatch_log_group" "function" {
  name              = "/aws/lambda/${var.function_name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.logs_kms_key_arn == "" ? null : var.logs_kms_key_arn
  tags              = var.tags
}

resource "aws_sqs_queue" "dlq" {
  name                      = "${var.function_name}-dlq"
  message_retention_seconds = 1209600
  # SSE-SQS, or SSE-KMS with dead_letter_queue_kms_key_arn (they exclude each other)
  sqs_managed_sse_enabled = var.dead_letter_queue_kms_key_arn == "" ? true : null
  kms_master_key_id       = var.dead_letter_queue_kms_key_arn == "" ? null : var.dead_letter_queue_kms_key_arn
  tags                    = var.tags
}

resource "aws_lambda_function" "this" {
  function_name                  = var.function_name
  description                    = "Drains the Kubernetes node of an EC2 instance before it goes away."
  role                           = aws_iam_role.function.arn
  filename                       = local.from_s3 ? null : local.package_path
  s3_bucket                      = local.from_s3 ? var.s3_bucket : null
  s3_key                         = local.from_s3 ? var.s3_key : null
  s3_object_version              = local.from_s3 && var.s3_object_version != "" ? var.s3_object_version : null
  source_code_hash               = local.from_s3 ? null : filebase64sha256(local.package_path)
  runtime                        = "provided.al2023"
  architectures                  = [var.architecture]
  handler                        = "bootstrap"
  timeout                        = 900
  memory_size                    = var.memory_size
  reserved_concurrent_executions = var.reserved_concurrency > 0 ? var.reserved_concurrency : -1

  environment {
    variables = local.environment
  }

  logging_config {
    log_format = "JSON"
    # TRACE: Lambda's filter keeps every line the function writes; the
    # function applies log_level itself (LOG_LEVEL), because the filter counts
    # a line without "level" as INFO and the metrics lines (EMF) have none:
    # at WARN or ERROR they would be dropped.
    application_log_level = "TRACE"
    system_log_level      = "WARN"
    log_group             = aws_cloudwatch_log_group.function.name
  }

  dynamic "vpc_config" {
    for_each = local.has_vpc ? [1] : []
    content {
      subnet_ids         = var.subnet_ids
      security_group_ids = var.security_group_ids
    }
  }

  tags = var.tags

  depends_on = [
    aws_iam_role_policy.function,
    aws_iam_role_policy_attachment.vpc,
  ]

  lifecycle {
    precondition {
      condition     = var.cluster_mode != "self-managed" || var.cluster_endpoint != ""
      error_message = "cluster_mode self-managed needs cluster_endpoint (and cluster_ca_data)."
    }
    precondition {
      condition     = !local.from_s3 || var.s3_key != ""
      error_message = "s3_bucket needs s3_key (the zip's key in the bucket)."
    }
    precondition {
      condition     = var.cluster_mode != "kubeconfig" || var.kubeconfig_ssm_parameter != "" || var.kubeconfig_secret_id != ""
      error_message = "cluster_mode kubeconfig needs kubeconfig_ssm_parameter or kubeconfig_secret_id."
    }
  }
}

# Asynchronous invocations (EventBridge, self-continuation): async_retry_attempts
# retries (default 2), then the DLQ.
resource "aws_lambda_function_event_invoke_config" "this" {
  function_name                = aws_lambda_function.this.function_name
  maximum_retry_attempts       = var.async_retry_attempts
  maximum_event_age_in_seconds = var.maximum_event_age_seconds

  destination_config {
    on_failure {
      destination = aws_sqs_queue.dlq.arn
    }
  }
}

# One hook per listed group, keyed by its position in asg_names (count), not
# by its name: a name that is known only after apply (an ASG made with
# name_prefix in the same apply, terraform-aws-eks's self-managed node
# groups) cannot key for_each, and the first apply would fail to plan.
resource "aws_autoscaling_lifecycle_hook" "terminate" {
  count = var.create_terminate_hook ? length(var.asg_names) : 0

  name                   = var.terminate_hook_name
  autoscaling_group_name = var.asg_names[count.index]
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_TERMINATING"
  heartbeat_timeout      = var.heartbeat_timeout
  default_result         = "CONTINUE"
  # the deployment's mark, as the function puts it on the groups it hooks
  # (internal/discovery/marks.go): the sweep finds the hook its own
  notification_metadata = local.hook_mark

  # the function and its permission exist before the first lifecycle action
  # can arrive; and the grant on the listed groups outlives the hook: an
  # apply that drops a group destroys its hook before it narrows the grant
  # (terraform destroys a dependent before it updates what it depends on),
  # so the actions held under the hook can still be completed
  depends_on = [aws_lambda_function.this, aws_cloudwatch_event_target.this, aws_iam_role_policy.function]
}

resource "aws_autoscaling_lifecycle_hook" "launch" {
  count = var.create_launch_hook ? length(var.asg_names) : 0

  name                   = var.launch_hook_name
  autoscaling_group_name = var.asg_names[count.index]
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_LAUNCHING"
  heartbeat_timeout      = var.heartbeat_timeout
  default_result         = "CONTINUE"
  notification_metadata  = local.hook_mark

  depends_on = [aws_lambda_function.this, aws_cloudwatch_event_target.this, aws_iam_role_policy.function]
}

resource "aws_eks_access_entry" "function" {
  count = var.cluster_mode == "eks" && var.create_access_entry ? 1 : 0

  cluster_name      = var.cluster_name
  principal_arn     = aws_iam_role.function.arn
  type              = "STANDARD"
  kubernetes_groups = ["node-drainer"]
  tags              = var.tags
}
