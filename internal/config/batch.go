package config

// Batch holds the settings of a batch of drains seen on the Nodes (issue
// 55 items 4 and 5). Both default to off: every setting's default keeps the
// function's writes as they were.
type Batch struct {
	// BatchCordon: before its own evictions begin, a terminate hook's
	// invocation cordons the nodes of every other instance of its group
	// already in Terminating:Wait, so that the pods it evicts land on nodes
	// that stay (BATCH_CORDON).
	BatchCordon bool
	// NodeConditions: the drain is told on the Node as the conditions of
	// KEP-5683 (Node Lifecycle Conditions), DrainInProgress and Drained,
	// owned as the marks are (NODE_CONDITIONS).
	NodeConditions bool
}

// batchVars are Batch's variables, listed in Vars.
var batchVars = []Var{
	{"BATCH_CORDON", "false", "On a terminate hook, cordon first the nodes of the group's other instances already in Terminating:Wait (a scale-in of many, an instance refresh), so that evicted pods do not land on the next node to go; costs one Auto Scaling read per drain when the group was not read already. Cordon only: each instance is still drained by its own event."},
	{"NODE_CONDITIONS", "false", "Set the Node conditions DrainInProgress and Drained (KEP-5683, Node Lifecycle Conditions) while node-drainer drains a node and once it is drained, removed with node-drainer's marks; needs nodes/status: patch (rbac.yaml grants it)."},
}

func init() { Vars = append(Vars, batchVars...) }

// readBatch reads Batch's settings.
func (e *envReader) readBatch(c *Config) {
	c.BatchCordon = e.boolean("BATCH_CORDON")
	c.NodeConditions = e.boolean("NODE_CONDITIONS")
}
