package soak

import (
	"context"
	"time"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/sim"
	"github.com/node-drainer/node-drainer/test/soak/pick"
)

// settleAfter is how long a day runs past its last event's end (and its
// sequels): two sweeps and more, for the drains, releases and the lifting
// of marks to end before the last checks.
const settleAfter = 3 * time.Minute

// overtime bounds how long a day waits, past settleAfter, for its actions,
// invocations and due checks to end.
const overtime = 8 * time.Minute

// PlayDay plays the day of seed on the harness with the bootstrap.
func PlayDay(ctx context.Context, env *harness.Env, bootstrap string, seed int64) *Result {
	ctx, cancel := context.WithCancel(ctx)
	d := newDay(ctx, env, bootstrap, seed)
	err := d.play()
	cancel()
	d.wg.Wait()
	d.tearDown()
	return d.result(err)
}

func (d *day) play() error {
	if err := d.setUp(); err != nil {
		return err
	}
	d.tracef("plan: %s", d.planLine())
	stop := make(chan struct{})
	defer close(stop)
	go d.sweep(stop)
	for _, o := range d.plan.Outages {
		d.after(scaled(o.From), func() {
			d.count(d.faults, "api:outage")
			d.tracef("world: apiserver unreachable for %s", scaled(o.To-o.From))
			d.api.Down(scaled(o.To - o.From))
		})
	}
	for _, h := range d.plan.Events {
		d.after(scaled(h.At), func() { d.happen(h) })
	}
	for _, h := range advisories(d.seed, d.plan) {
		d.after(scaled(h.At), func() { d.advise(h) })
	}
	end := d.t0.Add(lastEnd(d.seed, d.plan) + settleAfter)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-d.ctx.Done():
			return d.ctx.Err()
		}
		d.poll()
		now := time.Now()
		if now.After(end) && (d.settled() || now.After(end.Add(overtime))) {
			break
		}
	}
	d.final()
	d.faultCounts()
	return nil
}

// lastEnd is when the day's last event and its sequels end, on the
// soak's clock from the day's start.
func lastEnd(seed int64, plan sim.Plan) time.Duration {
	var last time.Duration
	for _, h := range plan.Events {
		last = max(last, h.At+h.For)
	}
	end := scaled(last)
	for _, h := range advisories(seed, plan) {
		end = max(end, scaled(h.At)+max(spotNotice, retireAfter)+scaled(90*time.Second))
	}
	return end
}

// setUpTime and tailTime are what a day takes besides its events and
// settleAfter, about: its scene built (a group, nodes, workloads running,
// the function started) and its last actions and invocations waited for.
const (
	setUpTime = time.Minute
	tailTime  = time.Minute
)

// Describe is what the soak knows of seed's day before it plays it: the
// kinds it plays (its plan's events, the soak's advisories, an outage of
// the apiserver) and how long it should take.
func Describe(seed int64) pick.Day {
	plan := sim.NewPlan(seed)
	var kinds []string
	for _, h := range plan.Events {
		kinds = append(kinds, h.What)
	}
	for _, h := range advisories(seed, plan) {
		kinds = append(kinds, h.What)
	}
	if len(plan.Outages) > 0 {
		kinds = append(kinds, "api:outage")
	}
	return pick.Day{Seed: seed, Kinds: kinds, Length: setUpTime + lastEnd(seed, plan) + settleAfter + tailTime}
}

// settled: no action waits, no invocation is queued or runs, no check is
// due later.
func (d *day) settled() bool {
	d.mu.Lock()
	waiting := len(d.due) > 0
	for _, ac := range d.actions {
		waiting = waiting || !ac.done
	}
	d.mu.Unlock()
	if waiting {
		return false
	}
	for _, inv := range d.rt.Invocations() {
		if !inv.Done() {
			return false
		}
	}
	return true
}
