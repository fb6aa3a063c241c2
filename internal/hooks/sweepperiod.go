package hooks

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// sweepSlack is what a hook's HeartbeatTimeout must outlast the sweep's
// period by: the sweep's own delivery (a scheduled rule fires within its
// minute) and its reading of the groups before it heartbeats.
const sweepSlack = time.Minute

// ratePattern is a schedule expression's rate form, as both templates
// accept it.
var ratePattern = regexp.MustCompile(`^rate\(([1-9][0-9]*) (minute|minutes|hour|hours|day|days)\)$`)

// SweepPeriod is the time between two sweeps that schedule gives (empty:
// no sweep; a cron expression: unknown, 0 and false).
func SweepPeriod(schedule string) (time.Duration, bool) {
	m := ratePattern.FindStringSubmatch(schedule)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, false
	}
	unit := map[string]time.Duration{"minute": time.Minute, "minutes": time.Minute, "hour": time.Hour, "hours": time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour}[m[2]]
	return time.Duration(n) * unit, true
}

// checkSweepOutlasted refuses a HeartbeatTimeout (seconds) that the sweep's
// period, plus sweepSlack, does not fit in. After Lambda's last retry of a
// failed invocation (a drain whose hand-over could not be invoked three
// times in a row, each heartbeating first), the next sweep is the only one
// left to heartbeat the action again; a hook that times out before it comes
// ends the drain with its default result (rule 3; found by the simulation's
// I3, seed 1187: a 180 s hook, sweeps 5 minutes apart).
func checkSweepOutlasted(heartbeat int64, schedule string) error {
	p, ok := SweepPeriod(schedule)
	if !ok {
		return nil // no sweep, or a cron expression: the operator's to keep (docs/configuration.md)
	}
	if least := p + sweepSlack; time.Duration(heartbeat)*time.Second < least {
		return fmt.Errorf("HeartbeatTimeout %d is shorter than the sweep's period (SweepSchedule %s) and a minute: after Lambda's last retry of a failed drain only the next sweep heartbeats its hook, which would time out first; want at least %d, or a shorter SweepSchedule", heartbeat, schedule, int64(least/time.Second))
	}
	return nil
}
