# The dashboard (docs/operations.md: Dashboard), the same as template.yaml's: the function's
# own embedded-metric-format metrics (namespace NodeDrainer, internal/metrics' catalog) beside
# Lambda's errors, and a Logs Insights table of the function's errors and warnings. Each
# NodeDrainer metric is read with a SEARCH over its exact dimension set, so that every event
# kind and result shows as its own line without listing them here.

resource "aws_cloudwatch_dashboard" "this" {
  count          = var.create_dashboard ? 1 : 0
  dashboard_name = var.function_name
  dashboard_body = jsonencode({
    widgets = [
      {
        type   = "metric"
        x      = 0
        y      = 0
        width  = 8
        height = 6
        properties = {
          title   = "Lifecycle hooks completed, by result"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,LifecycleResult} MetricName=\"HooksCompleted\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e1", label = "$${PROP('Dim.LifecycleResult')}" }],
          ]
        }
      },
      {
        type   = "metric"
        x      = 8
        y      = 0
        width  = 8
        height = 6
        properties = {
          title   = "Lifecycle hooks completed, by reason"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,CompletionReason} MetricName=\"HooksCompleted\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e1", label = "$${PROP('Dim.CompletionReason')}" }],
          ]
        }
      },
      {
        type   = "metric"
        x      = 16
        y      = 0
        width  = 8
        height = 6
        properties = {
          title   = "Errors"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            ["AWS/Lambda", "Errors", "FunctionName", var.function_name, { stat = "Sum", label = "invocation errors (Lambda)" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"Invocations\" FunctionName=\"${var.function_name}\" Result=\"failed\"', 'Sum', 300)", id = "e1", label = "failed $${PROP('Dim.Event')}" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"KubeAPIRetries\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e2", label = "Kubernetes retries $${PROP('Dim.Event')}" }],
          ]
        }
      },
      {
        type   = "metric"
        x      = 0
        y      = 6
        width  = 8
        height = 6
        properties = {
          title   = "Drain time (seconds): p50, p95, max"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"DrainSeconds\" FunctionName=\"${var.function_name}\"', 'p50', 300)", id = "e1", label = "p50 $${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"DrainSeconds\" FunctionName=\"${var.function_name}\"', 'p95', 300)", id = "e2", label = "p95 $${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"DrainSeconds\" FunctionName=\"${var.function_name}\"', 'Maximum', 300)", id = "e3", label = "max $${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
          ]
        }
      },
      {
        type   = "metric"
        x      = 8
        y      = 6
        width  = 8
        height = 6
        properties = {
          title   = "Pods evicted"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"PodsEvicted\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e1", label = "$${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
          ]
        }
      },
      {
        type   = "metric"
        x      = 16
        y      = 6
        width  = 8
        height = 6
        properties = {
          title   = "Waiting on PodDisruptionBudgets (seconds)"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"PDBBlockedSeconds\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e1", label = "total $${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"PDBBlockedSeconds\" FunctionName=\"${var.function_name}\"', 'Maximum', 300)", id = "e2", label = "longest $${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
          ]
        }
      },
      {
        type   = "metric"
        x      = 0
        y      = 12
        width  = 8
        height = 6
        properties = {
          title   = "Volume releases (force-released attachments; seconds)"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"RWOForceReleases\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e1", label = "released $${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"RWOReleaseSeconds\" FunctionName=\"${var.function_name}\"', 'Maximum', 300)", id = "e2", label = "seconds $${PROP('Dim.Event')} $${PROP('Dim.Result')}", yAxis = "right" }],
          ]
        }
      },
      {
        type   = "metric"
        x      = 8
        y      = 12
        width  = 16
        height = 6
        properties = {
          title   = "Sweep findings"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"SweepHooks\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e1", label = "SweepHooks" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"SweepDeadNodes\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e2", label = "SweepDeadNodes" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"SweepUnmarked\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e3", label = "SweepUnmarked" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"SweepOrphans\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e4", label = "SweepOrphans" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"SweepZombies\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e5", label = "SweepZombies" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"SweepReplaced\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e6", label = "SweepReplaced" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"SweepFailed\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e7", label = "SweepFailed" }],
          ]
        }
      },
      {
        type   = "metric"
        x      = 0
        y      = 18
        width  = 12
        height = 6
        properties = {
          title   = "Invocations and continuations, by event and result"
          region  = local.region
          view    = "timeSeries"
          stacked = false
          period  = 300
          metrics = [
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"Invocations\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e1", label = "$${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
            [{ expression = "SEARCH('{NodeDrainer,FunctionName,Event,Result} MetricName=\"Continuations\" FunctionName=\"${var.function_name}\"', 'Sum', 300)", id = "e2", label = "continued $${PROP('Dim.Event')} $${PROP('Dim.Result')}" }],
          ]
        }
      },
      {
        type   = "log"
        x      = 12
        y      = 18
        width  = 12
        height = 6
        properties = {
          title  = "Errors and warnings (logs)"
          region = local.region
          view   = "table"
          query  = "SOURCE '/aws/lambda/${var.function_name}' | fields @timestamp, level, message, error, instance, node | filter level in [\"ERROR\", \"WARN\"] | sort @timestamp desc | limit 100"
        }
      },
    ]
  })
}
