// Package pick chooses the soak's days: of the seeds ahead, the day that
// plays the most kinds (event kinds, advisories, outages) no day chosen so
// far plays, among those that end before the soak does. A short soak then
// plays every kind the seeds ahead hold, where seeds taken in turn leave the
// rare ones to chance; every day is still one seed's, played again alone by
// `make soak SEED=N`.
package pick

import (
	"slices"
	"time"
)

// Day is what the chooser knows of a seed's day before it is played.
type Day struct {
	Seed   int64
	Kinds  []string      // what it plays
	Length time.Duration // how long it is expected to take
}

// Chooser picks days from the seeds first, first+1, ... (New), a window
// of them considered at a time.
type Chooser struct {
	next     int64
	ahead    []Day
	window   int
	describe func(seed int64) Day
	chosen   map[string]int
	// Prefer, when set, narrows the choice to days that play one of these
	// kinds (a fix reverted that only such a day can show): seeds are read
	// further ahead, up to a hundred windows, to find them.
	Prefer []string
}

// New is a chooser of the seeds from first on, window of them considered
// at each pick, describe telling what a seed's day holds.
func New(first int64, window int, describe func(seed int64) Day) *Chooser {
	return &Chooser{next: first, window: max(window, 1), describe: describe, chosen: map[string]int{}}
}

// Next is the day to play next when left is the time the soak has left:
// of the window's days that fit in it, the one with the most kinds not
// chosen before, the earliest seed of those. ok is false when none fits.
func (c *Chooser) Next(left time.Duration) (Day, bool) {
	for len(c.ahead) < c.window {
		c.ahead = append(c.ahead, c.describe(c.next))
		c.next++
	}
	for range 100 * c.window {
		if len(c.Prefer) == 0 || slices.ContainsFunc(c.ahead, c.preferred) {
			break
		}
		c.ahead = append(c.ahead, c.describe(c.next))
		c.next++
	}
	best, bestNew := -1, -1
	for i, d := range c.ahead {
		if d.Length > left || (len(c.Prefer) > 0 && !c.preferred(d)) {
			continue
		}
		if n := c.unplayed(d); n > bestNew {
			best, bestNew = i, n
		}
	}
	if best < 0 {
		return Day{}, false
	}
	d := c.ahead[best]
	c.ahead = append(c.ahead[:best], c.ahead[best+1:]...)
	for _, k := range d.Kinds {
		c.chosen[k]++
	}
	return d, true
}

// unplayed is how many distinct kinds of d no chosen day plays.
func (c *Chooser) unplayed(d Day) int {
	seen := map[string]bool{}
	for _, k := range d.Kinds {
		if c.chosen[k] == 0 {
			seen[k] = true
		}
	}
	return len(seen)
}

// preferred says whether d plays a kind of Prefer.
func (c *Chooser) preferred(d Day) bool {
	return slices.ContainsFunc(d.Kinds, func(k string) bool { return slices.Contains(c.Prefer, k) })
}
