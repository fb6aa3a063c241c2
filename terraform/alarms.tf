# Alarms (docs/operations.md: Alarms), the same as template.yaml's. The last two read the
# function's own embedded-metric-format metrics (namespace NodeDrainer).

locals {
  alarm_actions = var.alarm_topic_arn == "" ? [] : [var.alarm_topic_arn]
}

resource "aws_cloudwatch_metric_alarm" "dlq_not_empty" {
  alarm_name          = "${var.function_name}-dlq-not-empty"
  alarm_description   = "Events failed every delivery or invocation attempt and wait in the dead-letter queue."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  dimensions = {
    QueueName = aws_sqs_queue.dlq.name
  }
}

resource "aws_cloudwatch_metric_alarm" "errors" {
  alarm_name          = "${var.function_name}-errors"
  alarm_description   = "Invocations failed (Lambda retries them, then the DLQ)."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  dimensions = {
    FunctionName = aws_lambda_function.this.function_name
  }
}

resource "aws_cloudwatch_metric_alarm" "throttles" {
  alarm_name          = "${var.function_name}-throttles"
  alarm_description   = "Invocations were throttled (reserved concurrency or the account limit)."
  namespace           = "AWS/Lambda"
  metric_name         = "Throttles"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  dimensions = {
    FunctionName = aws_lambda_function.this.function_name
  }
}

resource "aws_cloudwatch_metric_alarm" "hooks_abandoned" {
  alarm_name          = "${var.function_name}-hooks-abandoned"
  alarm_description   = "Lifecycle actions were completed with ABANDON (LIFECYCLE_RESULT_ON_FAILURE)."
  namespace           = "NodeDrainer"
  metric_name         = "HooksCompleted"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  dimensions = {
    FunctionName    = var.function_name
    LifecycleResult = "ABANDON"
  }
}

resource "aws_cloudwatch_metric_alarm" "hooks_at_deadline" {
  alarm_name          = "${var.function_name}-hooks-at-deadline"
  alarm_description   = "Lifecycle actions were completed because the drain ran out of time (DRAIN_TIMEOUT or the last invocation)."
  namespace           = "NodeDrainer"
  metric_name         = "HooksCompleted"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags

  dimensions = {
    FunctionName     = var.function_name
    CompletionReason = "at-deadline"
  }
}
