# Each variable is the snake_case twin of a parameter of the SAM template
# (template.yaml) with the same default; test/deploy's test fails when they
# drift. The package inputs (package_path, s3_*), architecture and tags exist
# only here (test/deploy: OnlyInTerraform).

variable "package_path" {
  description = "The Lambda zip built by `make package` (bootstrap at its root), relative to the directory terraform runs in; null = dist/node-drainer-<arm64|amd64>.zip as architecture says. Not read when s3_bucket is set."
  type        = string
  default     = null
}

variable "s3_bucket" {
  description = "S3 bucket holding the Lambda zip (a release's node-drainer-<version>-<arm64|amd64>.zip, say), in the function's region; empty = the local package_path."
  type        = string
  default     = ""
}

variable "s3_key" {
  description = "Key of the Lambda zip in s3_bucket."
  type        = string
  default     = ""
}

variable "s3_object_version" {
  description = "Version of the s3_key object (versioned buckets); empty = the latest. A new version redeploys the function."
  type        = string
  default     = ""
}

variable "architecture" {
  description = "Instruction set of the function, the one the package was built for: arm64 or x86_64 (`make package` builds both: node-drainer-arm64.zip and node-drainer-amd64.zip)."
  type        = string
  default     = "arm64"

  validation {
    condition     = contains(["arm64", "x86_64"], var.architecture)
    error_message = "architecture must be arm64 or x86_64."
  }
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}

variable "function_name" {
  description = "Lambda function name; also the prefix of the rule names, the queue and the log group."
  type        = string
  default     = "node-drainer"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,40}$", var.function_name))
    error_message = "function_name: 1-40 characters from A-Z a-z 0-9 _ -."
  }
}

variable "cluster_name" {
  description = "EKS cluster name, or the cluster id of a self-managed cluster (aws-iam-authenticator)."
  type        = string

  validation {
    condition     = can(regex("^[0-9A-Za-z][A-Za-z0-9_-]*$", var.cluster_name))
    error_message = "cluster_name must be a cluster name."
  }
}

variable "cluster_mode" {
  description = "eks (endpoint and CA from eks:DescribeCluster), self-managed (cluster_endpoint and cluster_ca_data, aws-iam-authenticator token) or kubeconfig (from SSM or Secrets Manager)."
  type        = string
  default     = "eks"

  validation {
    condition     = contains(["eks", "self-managed", "kubeconfig"], var.cluster_mode)
    error_message = "cluster_mode must be eks, self-managed or kubeconfig."
  }
}

variable "cluster_endpoint" {
  description = "API server URL (self-managed clusters; skips eks:DescribeCluster)."
  type        = string
  default     = ""
}

variable "cluster_ca_data" {
  description = "Base64 PEM of the API server's CA (self-managed clusters)."
  type        = string
  default     = ""
}

variable "kubeconfig_ssm_parameter" {
  description = "Name or ARN of an SSM parameter holding a kubeconfig (kubeconfig mode)."
  type        = string
  default     = ""
}

variable "kubeconfig_secret_id" {
  description = "Name or ARN of a Secrets Manager secret holding a kubeconfig (kubeconfig mode)."
  type        = string
  default     = ""
}

variable "asg_names" {
  description = "Auto Scaling groups whose instances belong to the cluster (the list). Lifecycle hooks are created on each; the function completes lifecycle actions on these and on the groups asg_tag_key selects. asg_names, asg_tag_key or both must be set."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for n in var.asg_names : n != ""])
    error_message = "asg_names: every name must be non-empty."
  }
}

variable "cluster_tag_key" {
  description = "Tag an instance must carry to be acted on; empty = kubernetes.io/cluster/<cluster_name>."
  type        = string
  default     = ""
}

variable "dry_run" {
  description = "Log the plan; write nothing to the cluster; complete hooks with CONTINUE at once."
  type        = bool
  default     = false
}

variable "drain_timeout" {
  description = "Overall drain timeout across continuations (Go duration)."
  type        = string
  default     = "30m"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.drain_timeout))
    error_message = "drain_timeout must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "dead_node_eviction_window" {
  description = "A terminate hook on a NotReady node waits at most this long for its evicted pods (Go duration)."
  type        = string
  default     = "30s"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.dead_node_eviction_window))
    error_message = "dead_node_eviction_window must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "node_lease_stale_after" {
  description = "The abrupt path forces nothing while the node is Ready and its Lease is younger than this (Go duration)."
  type        = string
  default     = "15s"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.node_lease_stale_after))
    error_message = "node_lease_stale_after must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "lease_namespace" {
  description = "Namespace of the per-instance Leases. The submodule modules/rbac (given the output rbac) creates it and the Role there (kubernetes/rbac-lease-namespace.yaml); without it create them as kubernetes/rbac-lease-namespace.yaml says."
  type        = string
  default     = "node-drainer"

  validation {
    # a DNS label, and none of the system namespaces: a Role in kube-system
    # would reach the control plane's leader-election leases, one in
    # kube-node-lease the kubelets' heartbeats
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.lease_namespace)) && !contains(["default", "kube-system", "kube-public", "kube-node-lease"], var.lease_namespace)
    error_message = "lease_namespace must be a DNS label (lower-case letters, digits, '-'), not default, kube-system, kube-public or kube-node-lease."
  }
}

variable "sweep_schedule" {
  description = "Schedule expression of the sweep that reconciles what events missed (stuck hooks, dead nodes, leftover marks, orphaned VolumeAttachments, zombie nodes, old leases); null or empty = the rule is disabled."
  type        = string
  default     = "rate(5 minutes)"

  validation {
    condition     = var.sweep_schedule == null || var.sweep_schedule == "" || can(regex("^(rate\\([1-9][0-9]* (minute|minutes|hour|hours|day|days)\\)|cron\\(.+\\))$", var.sweep_schedule))
    error_message = "sweep_schedule must be rate(<n> minutes|hours|days), cron(...), or null / empty."
  }
}

variable "zombie_after" {
  description = "The sweep reports a node NotReady this long while EC2 says its instance runs (Go duration)."
  type        = string
  default     = "10m"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.zombie_after))
    error_message = "zombie_after must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "zombie_action" {
  description = "What the sweep does with a zombie node: report (Event, log line) or replace (also SetInstanceHealth Unhealthy so its ASG replaces it; grants autoscaling:SetInstanceHealth on the listed ASGs)."
  type        = string
  default     = "report"

  validation {
    condition     = contains(["report", "replace"], var.zombie_action)
    error_message = "zombie_action must be report or replace."
  }
}

variable "zombie_max_per_sweep" {
  description = "Most zombie instances one sweep marks Unhealthy."
  type        = number
  default     = 1

  validation {
    condition     = var.zombie_max_per_sweep >= 0 && floor(var.zombie_max_per_sweep) == var.zombie_max_per_sweep
    error_message = "zombie_max_per_sweep must be an integer >= 0."
  }
}

variable "sweep_shard_nodes" {
  description = "Most Nodes one sweep invocation reads and acts on; a cluster with more splits each pass across concurrent self-invocations (grants lambda:InvokeFunction on the function itself). 0: never."
  type        = number
  default     = 5000

  validation {
    condition     = var.sweep_shard_nodes >= 0 && floor(var.sweep_shard_nodes) == var.sweep_shard_nodes
    error_message = "sweep_shard_nodes must be an integer >= 0."
  }
}

variable "zombie_max_asg_share" {
  description = "Most instances of one ASG leaving at once when the sweep marks a zombie Unhealthy (percent; at least one)."
  type        = number
  default     = 10

  validation {
    condition     = var.zombie_max_asg_share >= 1 && var.zombie_max_asg_share <= 100
    error_message = "zombie_max_asg_share must be 1-100 (percent)."
  }
}

variable "skip_nodes_owned_by" {
  description = "Lifecycle owners whose nodes are left alone (karpenter, auto-mode, managed-nodegroup); [] = act on every node (SKIP_NODES_OWNED_BY=none)."
  type        = list(string)
  default     = ["karpenter", "auto-mode", "managed-nodegroup"]

  validation {
    condition     = alltrue([for o in var.skip_nodes_owned_by : contains(["karpenter", "auto-mode", "managed-nodegroup"], o)])
    error_message = "skip_nodes_owned_by: each must be karpenter, auto-mode or managed-nodegroup; [] acts on every node."
  }
}

variable "advisory_mark_ttl" {
  description = "How long a spot warning's or rebalance recommendation's marks hold while the instance keeps running (Go duration)."
  type        = string
  default     = "1h"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.advisory_mark_ttl))
    error_message = "advisory_mark_ttl must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "spot_drain_timeout" {
  description = "Drain timeout after a spot interruption warning, or an interruptible Capacity Reservation's (~120 s notice)."
  type        = string
  default     = "100s"

  validation {
    # a Go duration of at most 2m: the spot notice is ~120 s (as template.yaml's AllowedPattern)
    condition     = can(regex("^((120|1[01][0-9]|[1-9][0-9]?)s|[1-9][0-9]{0,4}ms|[12]m|1m[0-5]?[0-9]s)$", var.spot_drain_timeout))
    error_message = "spot_drain_timeout must be a positive Go duration of at most 2m (ms, s, m), such as 90s."
  }
}

variable "spot_grace_period_cap" {
  description = "On a spot or capacity reservation interruption warning, the longest grace period an evicted pod gets (Go duration, at most 2m); each drain tier also gets at most its share of the time left."
  type        = string
  default     = "90s"

  validation {
    # a Go duration of at most 2m: the spot notice is ~120 s (as template.yaml's AllowedPattern)
    condition     = can(regex("^((120|1[01][0-9]|[1-9][0-9]?)s|[1-9][0-9]{0,4}ms|[12]m|1m[0-5]?[0-9]s)$", var.spot_grace_period_cap))
    error_message = "spot_grace_period_cap must be a positive Go duration of at most 2m (ms, s, m), such as 90s."
  }
}

variable "critical_priority_threshold" {
  description = "Pods at or above this priority (and system-node-critical / system-cluster-critical pods) are drained last."
  type        = number
  default     = 2000000000
}

variable "rebalance_action" {
  description = "What a rebalance recommendation does: cordon, drain or ignore."
  type        = string
  default     = "cordon"

  validation {
    condition     = contains(["cordon", "drain", "ignore"], var.rebalance_action)
    error_message = "rebalance_action must be cordon, drain or ignore."
  }
}

variable "scheduled_change_action" {
  description = "What an AWS Health scheduled change for an instance does: cordon, drain or ignore."
  type        = string
  default     = "drain"

  validation {
    condition     = contains(["cordon", "drain", "ignore"], var.scheduled_change_action)
    error_message = "scheduled_change_action must be cordon, drain or ignore."
  }
}

variable "scheduled_change_lead_time" {
  description = "Act on an AWS Health scheduled change this long before it starts; before that, at most cordon (Go duration)."
  type        = string
  default     = "15m"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.scheduled_change_lead_time))
    error_message = "scheduled_change_lead_time must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "lifecycle_result_on_failure" {
  description = "Lifecycle action result when the drain fails or times out: CONTINUE or ABANDON."
  type        = string
  default     = "CONTINUE"

  validation {
    condition     = contains(["CONTINUE", "ABANDON"], var.lifecycle_result_on_failure)
    error_message = "lifecycle_result_on_failure must be CONTINUE or ABANDON."
  }
}

variable "evict_unmanaged_pods" {
  description = "Evict pods that no controller owns (kubectl drain --force)."
  type        = bool
  default     = true
}

variable "pod_policy" {
  description = "Pods annotated karpenter.sh/do-not-disrupt \"true\" or cluster-autoscaler.kubernetes.io/safe-to-evict \"false\": ignore (drained as any other) or honor (a voluntary drain does not evict them and is reported blocked; a forced drain evicts them last, their grace period whole before its deadline)."
  type        = string
  default     = "ignore"
  validation {
    condition     = contains(["ignore", "honor"], var.pod_policy)
    error_message = "pod_policy must be ignore or honor."
  }
}

variable "volume_detach_timeout" {
  description = "How long a graceful drain waits for the node's VolumeAttachments to go."
  type        = string
  default     = "2m"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.volume_detach_timeout))
    error_message = "volume_detach_timeout must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "stopping_wait_timeout" {
  description = "How long the abrupt path waits for a stopping/shutting-down instance to be stopped/terminated."
  type        = string
  default     = "3m"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.stopping_wait_timeout))
    error_message = "stopping_wait_timeout must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "out_of_service_taint" {
  description = "Taint a node whose instance is confirmed down node.kubernetes.io/out-of-service."
  type        = bool
  default     = true
}

variable "delete_terminated_nodes" {
  description = "Delete the Node of a terminated instance (clusters without a cloud controller). Only then is nodes: delete granted (kubernetes/rbac-delete-nodes.yaml; applied by modules/rbac when given the output rbac)."
  type        = bool
  default     = false
}

variable "batch_cordon" {
  description = "On a terminate hook, cordon first the nodes of the group's other instances already in Terminating:Wait, so that evicted pods do not land on the next node to go (cordon only; each is drained by its own event)."
  type        = bool
  default     = false
}

variable "node_conditions" {
  description = "Set the Node conditions DrainInProgress and Drained (KEP-5683) while a node drains and once drained; removed with node-drainer's marks."
  type        = bool
  default     = false
}

variable "kube_client_qps" {
  description = "Kubernetes client QPS."
  type        = number
  default     = 100
}

variable "kube_client_burst" {
  description = "Kubernetes client burst."
  type        = number
  default     = 200
}

variable "deadline_margin" {
  description = "Time kept before the Lambda deadline for completing the hook / continuing."
  type        = string
  default     = "20s"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.deadline_margin))
    error_message = "deadline_margin must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "continue_long_drains" {
  description = "Continue a drain that outlives one invocation in a new asynchronous invocation (grants lambda:InvokeFunction on the function itself)."
  type        = bool
  default     = true
}

variable "max_continuations" {
  description = "Most continuations of one drain."
  type        = number
  default     = 20

  validation {
    condition     = var.max_continuations >= 0 && floor(var.max_continuations) == var.max_continuations
    error_message = "max_continuations must be an integer >= 0."
  }
}

variable "hook_names" {
  description = "Names of more lifecycle hooks that are node-drainer's to complete, besides terminate_hook_name and launch_hook_name; another tool's hook is never completed."
  type        = list(string)
  default     = []

  validation {
    # the function reads them as one comma-separated list (HOOK_NAMES)
    condition     = alltrue([for n in var.hook_names : can(regex("^[A-Za-z0-9_/-]{1,255}$", n))])
    error_message = "hook_names: each a lifecycle hook name (1-255 of A-Z a-z 0-9 _ - /), no commas."
  }
}

variable "memory_size" {
  description = "Function memory (MB)."
  type        = number
  default     = 256

  validation {
    condition     = var.memory_size >= 128 && var.memory_size <= 10240
    error_message = "memory_size must be 128-10240."
  }
}

variable "reserved_concurrency" {
  description = "Reserved concurrent executions: 0 = unreserved, else at least 3 (a drain, its continuation and a sweep at once) plus one for each other node that may drain at the same time."
  type        = number
  default     = 0

  validation {
    condition     = var.reserved_concurrency == 0 || (var.reserved_concurrency >= 3 && floor(var.reserved_concurrency) == var.reserved_concurrency)
    error_message = "reserved_concurrency must be 0 (unreserved) or a whole number of at least 3: one drain, its continuation and a sweep run at once, and below 3 one of them waits behind the others (docs/configuration.md)."
  }
}

variable "log_retention_days" {
  description = "CloudWatch Logs retention of the function's log group."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a CloudWatch Logs retention value."
  }
}

variable "log_level" {
  description = "Least severe level of the function's log lines: DEBUG, INFO, WARN or ERROR. Applied by the function (LOG_LEVEL); Lambda's application log filter stays at TRACE, so the metrics lines are kept at every level."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARN", "ERROR"], var.log_level)
    error_message = "log_level must be DEBUG, INFO, WARN or ERROR."
  }
}

variable "heartbeat_timeout" {
  description = "Lifecycle hook heartbeat timeout in seconds (the function heartbeats while it drains). At least 300 (Lambda retries a failed invocation 1 and then 2 minutes later), and at least the sweep's period (sweep_schedule) and a minute: after Lambda's last retry only the next sweep heartbeats the hook again."
  type        = number
  default     = 360

  validation {
    condition     = var.heartbeat_timeout >= 300 && var.heartbeat_timeout <= 7200
    error_message = "heartbeat_timeout must be 300-7200: Lambda retries a failed invocation 1 and then 2 minutes later, and a hook with a shorter timeout expires to its default result meanwhile."
  }
}

variable "create_terminate_hook" {
  description = "Create the terminate lifecycle hook on each ASG (false = you manage a hook named terminate_hook_name)."
  type        = bool
  default     = true
}

variable "terminate_hook_name" {
  description = "Name of the terminate hook; the rule forwards only this hook's actions."
  type        = string
  default     = "node-drainer-terminate"
}

variable "create_launch_hook" {
  description = "Create a launch lifecycle hook on each ASG."
  type        = bool
  default     = false
}

variable "launch_hook_name" {
  description = "Name of the launch hook; the rule forwards only this hook's actions."
  type        = string
  default     = "node-drainer-launch"
}

variable "maximum_event_age_seconds" {
  description = "Oldest event EventBridge delivers / Lambda runs asynchronously before it goes to the DLQ."
  type        = number
  default     = 3600

  validation {
    condition     = var.maximum_event_age_seconds >= 60 && var.maximum_event_age_seconds <= 21600
    error_message = "maximum_event_age_seconds must be 60-21600."
  }
}

variable "event_retry_attempts" {
  description = "Retries of each rule target when the invocation is refused (throttled by reserved_concurrency, say), within maximum_event_age_seconds."
  type        = number
  default     = 185

  validation {
    condition     = var.event_retry_attempts >= 0 && var.event_retry_attempts <= 185
    error_message = "event_retry_attempts must be 0-185."
  }
}

variable "async_retry_attempts" {
  description = "Retries of an asynchronous invocation that returned an error, then the DLQ."
  type        = number
  default     = 2

  validation {
    condition     = var.async_retry_attempts >= 0 && var.async_retry_attempts <= 2
    error_message = "async_retry_attempts must be 0-2."
  }
}

variable "subnet_ids" {
  description = "Subnets for the function (private cluster endpoint); empty = no VPC."
  type        = list(string)
  default     = []
}

variable "security_group_ids" {
  description = "Security groups for the function (must reach the cluster security group on 443)."
  type        = list(string)
  default     = []
}

variable "create_access_entry" {
  description = "cluster_mode eks only: create an EKS access entry mapping the function's role to the Kubernetes group node-drainer (authentication mode API or API_AND_CONFIG_MAP)."
  type        = bool
  default     = true
}

variable "alarm_topic_arn" {
  description = "SNS topic the alarms notify (alarm and OK); empty = the alarms are created without actions."
  type        = string
  default     = ""
}

variable "outcome_event_bus" {
  description = "EventBridge bus (its name, in this account and region; \"default\" for the account's default bus) the function puts one event per outcome on: a drain ended, failed or blocked, a forced release, a completed lifecycle action (docs/operations.md: Outcome events). Empty = none; the function is granted events:PutEvents on this bus only."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^[A-Za-z0-9._/-]{0,256}$", var.outcome_event_bus))
    error_message = "outcome_event_bus must be an EventBridge bus name in this account and region (default for the account's default bus), or empty."
  }
}

variable "outcome_blocked_after" {
  description = "A drain not finished after this long is told of once, as a Node Drain Blocked event on outcome_event_bus."
  type        = string
  default     = "5m"

  validation {
    # a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms)$", var.outcome_blocked_after))
    error_message = "outcome_blocked_after must be a positive Go duration such as 90s, 15m or 1h30m (units h, m, s, ms)."
  }
}

variable "outcome_events_target_arn" {
  description = "SNS topic (such as alarm_topic_arn's: mail, chat) or SQS queue that receives every outcome event of this function as one readable line, through a rule on outcome_event_bus; its policy must let events.amazonaws.com send to it. Empty = no rule."
  type        = string
  default     = ""
}

variable "create_dashboard" {
  description = "Create a CloudWatch dashboard named after the function: hooks completed, drain time, evictions and PDB waits, volume releases, sweep findings, errors (docs/operations.md: Dashboard)."
  type        = bool
  default     = true
}

variable "role_path" {
  description = "Path of the function's IAM role."
  type        = string
  default     = "/"

  validation {
    condition     = can(regex("^/([\\x21-\\x7E]{0,510}/)?$", var.role_path))
    error_message = "role_path must start and end with / (IAM path)."
  }
}

variable "role_permissions_boundary" {
  description = "ARN of the managed policy that bounds the function's role (permissions boundary); empty = none."
  type        = string
  default     = ""

  validation {
    condition     = var.role_permissions_boundary == "" || can(regex("^arn:[^:]+:iam::([0-9]{12}|aws):policy/.+$", var.role_permissions_boundary))
    error_message = "role_permissions_boundary must be empty or an IAM policy ARN."
  }
}

variable "logs_kms_key_arn" {
  description = "KMS key that encrypts the function's log group; empty = CloudWatch Logs' own encryption. Its key policy must let the logs service of the region use it."
  type        = string
  default     = ""

  validation {
    condition     = var.logs_kms_key_arn == "" || can(regex("^arn:[^:]+:kms:[^:]+:[0-9]{12}:key/.+$", var.logs_kms_key_arn))
    error_message = "logs_kms_key_arn must be empty or a KMS key ARN (arn:...:kms:<region>:<account>:key/<id>)."
  }
}

variable "dead_letter_queue_kms_key_arn" {
  description = "KMS key that encrypts the dead-letter queue; empty = SQS-managed encryption (SSE-SQS). The function's role is granted kms:GenerateDataKey and kms:Decrypt on it; its key policy must let events.amazonaws.com do the same (the rules' dead letters)."
  type        = string
  default     = ""

  validation {
    condition     = var.dead_letter_queue_kms_key_arn == "" || can(regex("^arn:[^:]+:kms:[^:]+:[0-9]{12}:key/.+$", var.dead_letter_queue_kms_key_arn))
    error_message = "dead_letter_queue_kms_key_arn must be empty or a KMS key ARN (arn:...:kms:<region>:<account>:key/<id>)."
  }
}

variable "asg_tag_key" {
  description = "Tag key that selects Auto Scaling groups besides asg_names: at every sweep the function puts its hooks on each group carrying asg_tag_key = asg_tag_value that lacks them, and handles those groups' lifecycle actions; its IAM grants on groups not listed are conditioned on this tag. A node group tagged after the deployment needs no redeploy. Empty = asg_names alone."
  type        = string
  default     = "node-drainer.io/enabled"

  validation {
    condition     = can(regex("^[\\p{L}\\p{Z}\\p{N}_.:/=+@-]{0,128}$", var.asg_tag_key))
    error_message = "asg_tag_key: at most 128 letters, digits, spaces or + - = . _ : / @."
  }
}

variable "asg_tag_value" {
  description = "Value asg_tag_key must have."
  type        = string
  default     = "true"

  validation {
    condition     = can(regex("^[\\p{L}\\p{Z}\\p{N}_.:/=+@-]{1,256}$", var.asg_tag_value))
    error_message = "asg_tag_value: 1-256 letters, digits, spaces or + - = . _ : / @."
  }
}

variable "group_policy_tags" {
  description = "A group's own tags node-drainer.io/rebalance-action, node-drainer.io/scheduled-change-action and node-drainer.io/drain-timeout override rebalance_action, scheduled_change_action and drain_timeout for its instances (at most one autoscaling:DescribeAutoScalingGroups per event, kept 60 s)."
  type        = bool
  default     = false
}

variable "lb_drain_wait" {
  description = "How long the evictions wait after the node is excluded from external load balancers: the target group's deregistration delay plus a health-check interval (Go duration; 0 = no wait; spent from drain_timeout: keep it well below)."
  type        = string
  default     = "0"

  validation {
    # 0, or a positive Go duration (h, m, s, ms; as template.yaml's AllowedPattern)
    condition     = can(regex("^(0|([1-9][0-9]{0,5}(\\.[0-9]{1,3})?h([0-9]{1,6}(\\.[0-9]{1,3})?m)?([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?m([0-9]{1,6}(\\.[0-9]{1,3})?s)?([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?s([0-9]{1,6}(\\.[0-9]{1,3})?ms)?|[1-9][0-9]{0,5}(\\.[0-9]{1,3})?ms))$", var.lb_drain_wait))
    error_message = "lb_drain_wait must be 0 or a positive Go duration such as 45s or 5m (units h, m, s, ms)."
  }
}
