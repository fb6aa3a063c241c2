package handler

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// movingClock is the real clock read from an origin a test sets: it reads
// at(), plus the real time passed since at() last changed. A test sets the
// handler's time (an event's age, a drain's start) and the drain's pacing
// and waits still run on real timers, as the tests were written for.
type movingClock struct {
	clock.RealClock
	at func() time.Time

	mu           sync.Mutex
	seen, anchor time.Time
}

func newMovingClock(at func() time.Time) *movingClock { return &movingClock{at: at} }

func (c *movingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at := c.at(); !at.Equal(c.seen) || c.anchor.IsZero() {
		c.seen, c.anchor = at, time.Now()
	}
	return c.seen.Add(time.Since(c.anchor))
}

func (c *movingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
