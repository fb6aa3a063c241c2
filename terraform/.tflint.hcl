# tflint configuration for the module and its examples (test/deploy/check.sh).
# Offline: only the terraform ruleset bundled in tflint is used; the aws
# ruleset plugin would need `tflint --init` (a download).
config {
  call_module_type = "local"
}

plugin "terraform" {
  enabled = true
  preset  = "all"
}
