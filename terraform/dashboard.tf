# The dashboard (docs/operations.md: Dashboard): the function's own embedded-metric-format
# metrics (namespace NodeDrainer, internal/metrics' catalog) beside Lambda's errors, and a
# Logs Insights table of the function's errors and warnings. Each NodeDrainer metric is read
# with a SEARCH over its exact dimension set, so that every event kind and result shows as its
# own line without listing them here.
#
# Its body is dashboard.json.tftpl, the one definition of the dashboard: template.yaml's
# DashboardBody is written from it by `make dashboard` (hack/dashboard), and `make
# deploy-check` fails when that copy is stale.

resource "aws_cloudwatch_dashboard" "this" {
  count          = var.create_dashboard ? 1 : 0
  dashboard_name = var.function_name
  dashboard_body = templatefile("${path.module}/dashboard.json.tftpl", {
    function_name = var.function_name
    region        = local.region
  })
}
