package bench

import "testing"

// The storm's evictions are per pod it drains: stormPods on every node and
// the StatefulSet pod of every stormRWOEvery-th (nodes 0, 5, ..., 45 of 50),
// so a storm that evicts each pod once reads 1.00, not 1010 / 1000.
func TestStormPodsOfCountsTheStatefulSetPods(t *testing.T) {
	for _, tc := range []struct{ nodes, want int }{{50, 1010}, {1, 21}, {5, 101}, {6, 122}} {
		if got := stormPodsOf(tc.nodes); got != tc.want {
			t.Errorf("stormPodsOf(%d) = %d, want %d", tc.nodes, got, tc.want)
		}
	}
}
