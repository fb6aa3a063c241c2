package faults

// refusalScenarios: rules 13, 15 and 16 on the hook's own path (admission
// refusals, late-bound pods, the hand-over).
func refusalScenarios() []scenario {
	return []scenario{}
}
