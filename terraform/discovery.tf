# Node groups chosen by tag (asg_tag_key = asg_tag_value), beside or instead
# of asg_names: the function puts its hooks on every tagged group that lacks
# them at each sweep (internal/discovery) and handles their lifecycle
# actions, so a group created or tagged after this deployment needs no
# redeploy. Its grants on groups not listed are conditioned on the tag: a
# group without it can be read, never written. The same as the
# GroupTag* role policies of template.yaml.

locals {
  selects_by_tag = var.asg_tag_key != ""

  # The hook rules match on the hook's name alone when groups are chosen by
  # tag (their names are not known here); else on the listed groups too.
  hook_rule_groups = { for k, v in { AutoScalingGroupName = var.asg_names } : k => v if !local.selects_by_tag }

  any_asg_arn = "arn:${local.partition}:autoscaling:${local.region}:${local.account}:autoScalingGroup:*:autoScalingGroupName/*"

  # Each hook of node-drainer's names, in its NotificationMetadata, the one
  # deployment that put it (internal/discovery/marks.go: one owner per hook,
  # the same bytes as the function's mark); only that deployment corrects or
  # removes it.
  hook_mark = jsonencode({ "node-drainer" = [var.function_name] })

  # The function's input about the hooks of tagged groups
  # (internal/hooks/stackhooks.go).
  hooks_input = {
    NodeDrainer         = "lifecycle-hooks"
    AsgTagKey           = var.asg_tag_key
    AsgTagValue         = var.asg_tag_value
    TerminateHookName   = var.terminate_hook_name
    LaunchHookName      = var.launch_hook_name
    CreateTerminateHook = tostring(var.create_terminate_hook)
    CreateLaunchHook    = tostring(var.create_launch_hook)
    HeartbeatTimeout    = tostring(var.heartbeat_timeout)
    SweepSchedule       = local.sweep_on ? var.sweep_schedule : ""
    Owner               = var.function_name
  }
}

data "aws_iam_policy_document" "discovery" {
  # Put the hooks on tagged groups; complete and heartbeat their actions;
  # remove the hooks when node-drainer is uninstalled (SAM's stack from its
  # custom resource, terraform destroy from aws_lambda_invocation.hooks).
  statement {
    sid       = "GroupTagLifecycle"
    effect    = "Allow"
    actions   = ["autoscaling:CompleteLifecycleAction", "autoscaling:DeleteLifecycleHook", "autoscaling:PutLifecycleHook", "autoscaling:RecordLifecycleActionHeartbeat"]
    resources = [local.any_asg_arn]

    condition {
      test     = "StringEquals"
      variable = "autoscaling:ResourceTag/${var.asg_tag_key}"
      values   = [var.asg_tag_value]
    }
  }

  # A destroy removes the hooks this deployment put on a group that has lost
  # the tag since (taken off, or its value changed), which the statement
  # above no longer grants; it deletes only hooks of its names whose
  # NotificationMetadata marks this deployment alone (internal/hooks,
  # stackhooks.go: untaggedSince; rule 18).
  statement {
    sid       = "UntaggedGroupHooks"
    effect    = "Allow"
    actions   = ["autoscaling:DeleteLifecycleHook"]
    resources = [local.any_asg_arn]
  }

  # The removal's mark on the function itself (a tag), which the sweep reads
  # before and after putting hooks, so that none is put back once a destroy
  # has begun (internal/hooks/removal.go).
  statement {
    sid       = "RemovalMark"
    effect    = "Allow"
    actions   = ["lambda:ListTags", "lambda:TagResource", "lambda:UntagResource"]
    resources = [local.function_arn]
  }

  # The sweep marks a zombie node's instance Unhealthy (zombie_action replace only).
  dynamic "statement" {
    for_each = var.zombie_action == "replace" ? [1] : []
    content {
      sid       = "GroupTagInstanceHealth"
      effect    = "Allow"
      actions   = ["autoscaling:SetInstanceHealth"]
      resources = [local.any_asg_arn]

      condition {
        test     = "StringEquals"
        variable = "autoscaling:ResourceTag/${var.asg_tag_key}"
        values   = [var.asg_tag_value]
      }
    }
  }

  lifecycle {
    precondition {
      condition     = local.selects_by_tag || length(var.asg_names) > 0
      error_message = "Set asg_names, asg_tag_key or both: nothing chooses the node groups."
    }
  }
}

resource "aws_iam_role_policy" "discovery" {
  count = local.selects_by_tag ? 1 : 0

  name   = "node-drainer-group-tag"
  role   = aws_iam_role.function.id
  policy = data.aws_iam_policy_document.discovery.json

  # an apply that changes the tag changes this grant after the release
  # invocation has removed the hooks of the groups leaving the deployment
  depends_on = [aws_lambda_invocation.release]
}

# An update's first step, as template.yaml's LifecycleHooksRelease: when the
# tag or the hook names change, the function removes the hooks of the groups
# that leave the deployment while the grant on them is still the old one
# (aws_iam_role_policy.discovery depends on this resource, so terraform
# changes the grant after it). Its create and delete do nothing. A removal
# that fails fails the apply before the grant changes; terraform keeps the
# new input all the same, so the next apply does not invoke it again:
# delete the hooks the error names by hand before applying again
# (docs/deploy.md).
resource "aws_lambda_invocation" "release" {
  count = local.selects_by_tag ? 1 : 0

  function_name   = aws_lambda_function.this.function_name
  lifecycle_scope = "CRUD"
  input           = jsonencode(merge(local.hooks_input, { Release = "true" }))

  # the lifecycle events' targets outlive it, as they outlive the removal
  depends_on = [aws_cloudwatch_event_target.this]
}

# The hooks the sweep put on tagged groups are no resource of this module:
# the function removes them itself when the module is destroyed, as SAM's
# Custom::LifecycleHooks does on a stack's delete. terraform invokes it with
# this input and {"tf": {"action": "create" | "update" | "delete"}}: create
# and update check the hook settings and put the hooks on the tagged groups
# of this cluster that lack them (an update also puts a renamed hook's
# new name on the tagged groups, then removes the old one), delete marks the
# function's removal (a tag on it, which every sweep reads before and after
# putting hooks: none is put back) and removes the deployment's hooks
# (these names only, and only those their NotificationMetadata marks this
# deployment's: never another tool's or another deployment's) from every
# group carrying the tag. A removal that fails fails the destroy, naming
# the group. The sweep's rule depends on this resource, so a destroy
# removes the rule first; this resource depends on the grant it uses and on
# the lifecycle rules' targets, so those go after it. The listed groups'
# hooks are the aws_autoscaling_lifecycle_hook resources of main.tf.
resource "aws_lambda_invocation" "hooks" {
  count = local.selects_by_tag ? 1 : 0

  function_name   = aws_lambda_function.this.function_name
  lifecycle_scope = "CRUD"
  input           = jsonencode(local.hooks_input)

  # the grants the removal uses outlive it, and so do the lifecycle events'
  # targets (a removal that fails leaves hooks whose events still arrive)
  depends_on = [aws_iam_role_policy.discovery, aws_cloudwatch_event_target.this]
}
