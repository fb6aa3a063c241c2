package event

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A sweep shard's payload round-trips; a malformed one is refused with a
// clear error (ErrMalformed), whatever is wrong with it.
func TestSweepShardPayload(t *testing.T) {
	at := time.Date(2026, 11, 25, 20, 0, 0, 0, time.UTC)
	good := SweepShard{Pass: "p-1", Index: 2, Of: 3, Continue: "tok", StartedAt: at, Zombies: true}
	b, err := good.Payload()
	if err != nil {
		t.Fatal(err)
	}
	ev, cont, err := ParseInvocation(b)
	if err != nil || cont != nil || ev.Kind != KindSweep || ev.Shard == nil || *ev.Shard != good || ev.ID != "p-1" {
		t.Fatalf("parsed %+v %v %v: want the shard back", ev, cont, err)
	}
	for name, tc := range map[string]struct{ payload, says string }{
		"index 0":       {`{"nodeDrainerSweepShard":{"pass":"p","index":0,"of":2,"continue":"t","startedAt":"2026-11-25T20:00:00Z"}}`, "index 0 of 2"},
		"index past of": {`{"nodeDrainerSweepShard":{"pass":"p","index":2,"of":2,"continue":"t","startedAt":"2026-11-25T20:00:00Z"}}`, "index 2 of 2"},
		"no continue":   {`{"nodeDrainerSweepShard":{"pass":"p","index":1,"of":2,"startedAt":"2026-11-25T20:00:00Z"}}`, "continue is missing"},
		"no pass":       {`{"nodeDrainerSweepShard":{"index":1,"of":2,"continue":"t","startedAt":"2026-11-25T20:00:00Z"}}`, "pass is missing"},
		"no start":      {`{"nodeDrainerSweepShard":{"pass":"p","index":1,"of":2,"continue":"t"}}`, "startedAt is missing"},
		"not an object": {`{"nodeDrainerSweepShard":[1]}`, "not a JSON object"},
		"another key":   {`{"nodeDrainerSweepShard":{},"x":1}`, "only top-level key"},
		"a wrong type":  {`{"nodeDrainerSweepShard":{"index":"one"}}`, "decoding"},
	} {
		t.Run(name, func(t *testing.T) {
			ev, _, err := ParseInvocation([]byte(tc.payload))
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.says) || ev.Shard != nil {
				t.Errorf("error %v: want ErrMalformed saying %q", err, tc.says)
			}
		})
	}
	if _, err := (SweepShard{Pass: "p", Index: 1, Of: 1, Continue: "t", StartedAt: at}).Payload(); err == nil {
		t.Error("a shard index 1 of 1 was built")
	}
}
