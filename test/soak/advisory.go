package soak

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/sim"
)

// Advisories are the events test/sim's world does not play (its plans
// draw none): spot interruption warnings, rebalance recommendations and
// AWS Health scheduled changes. The soak draws them from the seed too, up
// to two a day, each on a node of the group at a time of the day's first
// 20 minutes (compressed).

// advisoryMarkTTL is the day's ADVISORY_MARK_TTL: the marks of a
// rebalance recommendation on an instance that runs on are lifted by a
// sweep after it, within the day (the default, an hour, outlasts it).
const advisoryMarkTTL = "2m"

// spotNotice is how long after its warning a spot instance is reclaimed:
// EC2's two minutes, not compressed (the function's SPOT_DRAIN_TIMEOUT
// fits them).
const spotNotice = 2 * time.Minute

// retireAfter is how long after an AWS Health scheduled change is told of
// the instance is retired (stopped), within SCHEDULED_CHANGE_LEAD_TIME.
const retireAfter = 2 * time.Minute

// advisories are the advisories of seed's day (plan is its plan).
func advisories(seed int64, plan sim.Plan) []sim.Happening {
	kinds := []string{"spot", "rebalance", "health"}
	var out []sim.Happening
	for i := range 2 {
		key := fmt.Sprintf("soak/advisory/%d", i)
		if sim.Draw(seed, key) >= 0.5 {
			continue
		}
		out = append(out, sim.Happening{
			What: kinds[int(sim.Draw(seed, key+"/kind")*3)],
			At:   time.Duration(5+sim.Draw(seed, key+"/at")*1200) * time.Second,
			Node: int(sim.Draw(seed, key+"/node") * float64(plan.Nodes)),
		})
	}
	return out
}

// advise plays an advisory: its event, then what EC2 does.
func (d *day) advise(h sim.Happening) {
	in, _ := d.inst(h.Node)
	id := in.ID
	d.mu.Lock()
	inService := d.member[id] == "InService"
	d.mu.Unlock()
	if !inService || d.ec2State(id) != "running" {
		return
	}
	d.tracef("world: %s (%s, %s)", h, id, in.PrivateDNSName)
	d.count(d.events, h.What)
	switch h.What {
	case "spot":
		if ev, err := harness.EventFile("spot-interruption.json", map[string]string{"instance-id": id, "instance-action": "terminate"}); err == nil {
			d.emit("spot/"+id, ev)
		}
		d.after(spotNotice, func() {
			d.tracef("world: spot instance %s reclaimed", id)
			d.crash(id)
		})
	case "rebalance":
		if ev, err := harness.EventFile("rebalance-recommendation.json", map[string]string{"instance-id": id}); err == nil {
			d.emit("rebalance/"+id, ev)
		}
	case "health":
		if ev, err := healthEvent(id, time.Now().Add(retireAfter)); err == nil {
			d.emit("health/"+id, ev)
		}
		d.after(retireAfter, func() {
			d.tracef("world: %s retired (stopped) by its scheduled change", id)
			d.stop(id, in.PrivateDNSName, sim.Happening{What: "stop"})
		})
	}
}

// healthEvent is an AWS Health scheduled change (a retirement) of id,
// starting at start.
func healthEvent(id string, start time.Time) ([]byte, error) {
	b, err := harness.EventFile("scheduled-change.json", nil)
	if err != nil {
		return nil, err
	}
	var ev map[string]any
	if err := json.Unmarshal(b, &ev); err != nil {
		return nil, err
	}
	det := ev["detail"].(map[string]any)
	det["statusCode"] = "upcoming"
	det["startTime"] = start.UTC().Format(time.RFC1123)
	det["endTime"] = start.Add(2 * time.Hour).UTC().Format(time.RFC1123)
	det["affectedEntities"] = []map[string]any{{"entityValue": id, "tags": map[string]string{}}}
	ev["resources"] = []string{id}
	return json.Marshal(ev)
}
