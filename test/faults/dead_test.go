package faults

// deadScenarios: rule 16 and the abrupt path's readings (a NotReady node
// whose kubelet Lease is fresh, a hibernated stop, an orphaned attachment
// whose instance came back, a listed group's foreign launch).
func deadScenarios() []scenario {
	return []scenario{}
}
