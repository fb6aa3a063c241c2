package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// shardKey is the only top-level key of a sweep shard's payload.
const shardKey = "nodeDrainerSweepShard"

// SweepShard is what the sweep sends itself, asynchronously, when a pass
// is split across invocations: shard Index of Of (0 is the scheduled
// invocation itself), which reads the cluster's Nodes from Continue (the
// apiserver's continue token of the pass's node list) for at most
// SWEEP_SHARD_NODES of them. Serialized as
//
//	{"nodeDrainerSweepShard": {"pass": "...", "index": 1, "of": 3, "continue": "...", "startedAt": "...", "zombies": false}}
type SweepShard struct {
	// Pass names the logical pass (the scheduled event's id): every shard's
	// summary carries it.
	Pass      string    `json:"pass"`
	Index     int       `json:"index"`
	Of        int       `json:"of"`
	Continue  string    `json:"continue"`
	StartedAt time.Time `json:"startedAt"`
	// Zombies: this shard may mark zombie instances Unhealthy (one shard a
	// pass does, in turns, so that ZOMBIE_MAX_PER_SWEEP and
	// ZOMBIE_MAX_ASG_SHARE hold for the pass); the others report them.
	Zombies bool `json:"zombies,omitempty"`
}

// ShardMaxAge is how old a shard may be when it runs: its continue token
// expires with the apiserver's compaction (5 minutes by default), and a
// shard delivered later belongs to a pass long over.
const ShardMaxAge = 5 * time.Minute

// Payload is the invocation payload that carries s.
func (s SweepShard) Payload() ([]byte, error) {
	s.StartedAt = s.StartedAt.UTC()
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("building sweep shard: %w", err)
	}
	return json.Marshal(map[string]SweepShard{shardKey: s})
}

func (s SweepShard) check() error {
	var problems problemList
	if s.Pass == "" {
		problems.add(errors.New("pass is missing"))
	}
	if s.Index < 1 || s.Of <= s.Index {
		problems.add(fmt.Errorf("index %d of %d: want 1 <= index < of", s.Index, s.Of))
	}
	if s.Continue == "" {
		problems.add(errors.New("continue is missing"))
	}
	if s.StartedAt.IsZero() {
		problems.add(errors.New("startedAt is missing"))
	}
	return problems.err()
}

// parseShard decodes a shard payload's inner object into a sweep Event.
func parseShard(inner json.RawMessage) (Event, error) {
	if !isJSONObject(inner) {
		return Event{}, malformed("sweep shard: %s is not a JSON object", shardKey)
	}
	var s SweepShard
	if err := json.Unmarshal(inner, &s); err != nil {
		return Event{}, malformed("sweep shard: decoding: %w", err)
	}
	if err := s.check(); err != nil {
		return Event{}, malformed("sweep shard: %w", err)
	}
	return Event{Kind: KindSweep, ID: s.Pass, Source: sourceEvents, DetailType: detailTypeScheduled, Time: s.StartedAt, Shard: &s}, nil
}
