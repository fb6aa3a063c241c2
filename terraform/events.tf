# One EventBridge rule per kind of event the function handles; the same
# patterns as the Events of NodeDrainerFunction in template.yaml. Rule names are
# "<function_name>-<key>"; the sweep's schedule is "<function_name>-sweep".

locals {
  event_rules = {
    terminate-hook = {
      description = "ASG terminate lifecycle actions of our hook (of the listed groups, without asg_tag_key)"
      pattern = {
        source        = ["aws.autoscaling"]
        "detail-type" = ["EC2 Instance-terminate Lifecycle Action"]
        detail = merge(local.hook_rule_groups, {
          LifecycleHookName = [var.terminate_hook_name]
        })
      }
    }
    launch-hook = {
      description = "ASG launch lifecycle actions of our hook (of the listed groups, without asg_tag_key)"
      pattern = {
        source        = ["aws.autoscaling"]
        "detail-type" = ["EC2 Instance-launch Lifecycle Action"]
        detail = merge(local.hook_rule_groups, {
          LifecycleHookName = [var.launch_hook_name]
        })
      }
    }
    spot-interruption = {
      description = "EC2 spot interruption warnings"
      pattern = {
        source        = ["aws.ec2"]
        "detail-type" = ["EC2 Spot Instance Interruption Warning"]
      }
    }
    capacity-interruption = {
      description = "EC2 interruptible Capacity Reservations' interruption warnings"
      pattern = {
        source = ["aws.ec2"]
        "detail-type" = [
          "EC2 Capacity Reservation Instance Interruption Warning",
          "EC2 Interruptible Capacity Reservation Instance Interruption Warning",
        ]
      }
    }
    capacity-block = {
      description = "EC2 Capacity Blocks' expiration warnings"
      pattern = {
        source        = ["aws.ec2"]
        "detail-type" = ["Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"]
      }
    }
    rebalance = {
      description = "EC2 instance rebalance recommendations"
      pattern = {
        source        = ["aws.ec2"]
        "detail-type" = ["EC2 Instance Rebalance Recommendation"]
      }
    }
    state-change = {
      description = "EC2 instance state changes that take a node away or bring it back"
      pattern = {
        source        = ["aws.ec2"]
        "detail-type" = ["EC2 Instance State-change Notification"]
        detail = {
          state = ["stopping", "stopped", "shutting-down", "terminated", "running"]
        }
      }
    }
    scheduled-change = {
      description = "AWS Health scheduled changes for EC2"
      pattern = {
        source        = ["aws.health"]
        "detail-type" = ["AWS Health Event"]
        detail = {
          service           = ["EC2"]
          eventTypeCategory = ["scheduledChange"]
        }
      }
    }
  }

  sweep_on = var.sweep_schedule != null && var.sweep_schedule != ""
  # the sweep's period in seconds, of a rate expression (null: no sweep, or
  # a cron expression, whose period is the operator's to keep)
  sweep_rate   = local.sweep_on ? regex("^(?:rate\\(([0-9]+) (minute|minutes|hour|hours|day|days)\\))?", var.sweep_schedule) : [null, null]
  sweep_period = local.sweep_rate[0] == null ? null : tonumber(local.sweep_rate[0]) * { minute = 60, minutes = 60, hour = 3600, hours = 3600, day = 86400, days = 86400 }[local.sweep_rate[1]]

  # Every rule that invokes the function, the sweep's schedule included: one
  # target (same DLQ and retry policy) and one permission each.
  all_rules = merge(aws_cloudwatch_event_rule.this, { sweep = aws_cloudwatch_event_rule.sweep })
}

resource "aws_cloudwatch_event_rule" "this" {
  for_each = local.event_rules

  name          = "${var.function_name}-${each.key}"
  description   = "node-drainer: ${each.value.description}"
  event_pattern = jsonencode(each.value.pattern)
  tags          = var.tags
}

# The sweep: an Events rule with a schedule (source aws.events, detail-type
# "Scheduled Event"), the same function. sweep_schedule null or "": the rule
# stays, disabled (as in template.yaml).
resource "aws_cloudwatch_event_rule" "sweep" {
  name                = "${var.function_name}-sweep"
  description         = "node-drainer: the sweep, which reconciles what events missed"
  schedule_expression = local.sweep_on ? var.sweep_schedule : "rate(5 minutes)"
  state               = local.sweep_on ? "ENABLED" : "DISABLED"
  tags                = var.tags

  # destroyed before the invocation that removes the hooks the sweep put
  depends_on = [aws_lambda_invocation.hooks]

  lifecycle {
    # after Lambda's last retry of a failed drain only the next sweep
    # heartbeats its hook: the hook must outlast the sweep's period and a
    # minute (as the function refuses otherwise: internal/hooks/sweepperiod.go)
    precondition {
      condition     = var.heartbeat_timeout >= coalesce(local.sweep_period, 0) + 60 # no period (cron, none): 60, below the least heartbeat_timeout
      error_message = "heartbeat_timeout (${var.heartbeat_timeout}) must be at least the sweep's period and a minute (sweep_schedule ${coalesce(var.sweep_schedule, "null")}: ${coalesce(local.sweep_period, 0) + 60}): after Lambda's last retry of a failed drain only the next sweep heartbeats its hook. Raise heartbeat_timeout or shorten sweep_schedule."
    }
  }
}

# The event rules' targets and permissions. The sweep's are apart: the
# sweep's rule goes before aws_lambda_invocation.hooks at a destroy, these
# after it, so the lifecycle events still reach the function while its hooks
# are there (a removal that fails leaves both).
resource "aws_cloudwatch_event_target" "this" {
  for_each = aws_cloudwatch_event_rule.this

  rule = each.value.name
  arn  = aws_lambda_function.this.arn

  retry_policy {
    maximum_event_age_in_seconds = var.maximum_event_age_seconds
    maximum_retry_attempts       = var.event_retry_attempts
  }

  dead_letter_config {
    arn = aws_sqs_queue.dlq.arn
  }

  depends_on = [aws_lambda_permission.events]
}

resource "aws_lambda_permission" "events" {
  for_each = aws_cloudwatch_event_rule.this

  statement_id  = "events-${each.key}"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.this.function_name
  principal     = "events.amazonaws.com"
  source_arn    = each.value.arn
}

# The sweep's target and permission: the same settings as the others.
resource "aws_cloudwatch_event_target" "sweep" {
  rule = aws_cloudwatch_event_rule.sweep.name
  arn  = aws_lambda_function.this.arn

  retry_policy {
    maximum_event_age_in_seconds = var.maximum_event_age_seconds
    maximum_retry_attempts       = var.event_retry_attempts
  }

  dead_letter_config {
    arn = aws_sqs_queue.dlq.arn
  }

  depends_on = [aws_lambda_permission.sweep]
}

resource "aws_lambda_permission" "sweep" {
  statement_id  = "events-sweep"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.this.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.sweep.arn
}

# they were instances of the resources above until the sweep's went apart
moved {
  from = aws_cloudwatch_event_target.this["sweep"]
  to   = aws_cloudwatch_event_target.sweep
}

moved {
  from = aws_lambda_permission.events["sweep"]
  to   = aws_lambda_permission.sweep
}

# Every outcome event to an SNS topic or SQS queue, as one line a person reads
# (outcome_events_target_arn); the same rule as OutcomeEventsRule of
# template.yaml.
resource "aws_cloudwatch_event_rule" "outcomes" {
  count = var.outcome_event_bus != "" && var.outcome_events_target_arn != "" ? 1 : 0

  name           = "${var.function_name}-outcomes"
  description    = "node-drainer: outcome events to the people on call"
  event_bus_name = var.outcome_event_bus
  event_pattern = jsonencode({
    source = ["node-drainer"]
    detail = { function = [var.function_name] }
  })
  tags = var.tags
}

resource "aws_cloudwatch_event_target" "outcomes" {
  count = length(aws_cloudwatch_event_rule.outcomes)

  rule           = aws_cloudwatch_event_rule.outcomes[0].name
  event_bus_name = var.outcome_event_bus
  target_id      = "outcomes"
  arn            = var.outcome_events_target_arn

  input_transformer {
    input_paths = {
      type     = "$.detail-type"
      instance = "$.detail.instance"
      node     = "$.detail.node"
      cluster  = "$.detail.cluster"
      result   = "$.detail.result"
      reason   = "$.detail.reason"
    }
    input_template = "\"<type>: <instance> (<node>) in <cluster>: <result> <reason>\""
  }
}
