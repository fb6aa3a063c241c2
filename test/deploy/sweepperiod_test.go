package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/hooks"
)

// terraform's plan refuses a heartbeat_timeout the sweep's period and a
// minute do not fit in, as the function's custom resource does for SAM
// (internal/hooks/sweepperiod.go): events.tf's own locals and precondition,
// evaluated by terraform for each schedule, agree with the function's.
func TestTerraformSweepPeriodAgreesWithTheFunction(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatal("terraform is not on PATH: install it (make tools, or .ci/run installs it)")
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "terraform", "events.tf"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	var locals []string
	for _, name := range []string{"sweep_on", "sweep_rate", "sweep_period"} {
		m := regexp.MustCompile(`(?m)^\s*` + name + `\s*=.*$`).FindString(src)
		if m == "" {
			t.Fatalf("events.tf: no local %s", name)
		}
		locals = append(locals, m)
	}
	cond := regexp.MustCompile(`(?s)precondition \{\s*condition\s*=\s*([^\n#]*local\.sweep_period[^\n#]*)`).FindStringSubmatch(src)
	if cond == nil {
		t.Fatal("events.tf: no precondition on local.sweep_period")
	}
	dir := t.TempDir()
	cfg := "variable \"sweep_schedule\" {\n  type = string\n}\nvariable \"heartbeat_timeout\" {\n  type = number\n}\nlocals {\n" + strings.Join(locals, "\n") + "\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	eval := func(expr, schedule string, heartbeat int) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "terraform", "console", "-var", "sweep_schedule="+schedule, "-var", "heartbeat_timeout="+strconv.Itoa(heartbeat))
		cmd.Dir, cmd.Stdin = dir, strings.NewReader(expr+"\n")
		cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("terraform console %q with sweep_schedule %q: %v", expr, schedule, err)
		}
		return strings.TrimSpace(string(out))
	}
	for _, schedule := range []string{"rate(5 minutes)", "rate(1 minute)", "rate(2 hours)", "rate(1 day)", "cron(0/10 * * * ? *)", ""} {
		p, ok := hooks.SweepPeriod(schedule)
		want := "tonumber(null)"
		if ok {
			want = strconv.Itoa(int(p / time.Second))
		}
		if got := eval("local.sweep_period", schedule, 360); got != want {
			t.Errorf("sweep_schedule %q: terraform's period %s, the function's %s", schedule, got, want)
		}
		for _, hb := range []int{300, 359, 360, 3600, 7200} {
			refused := ok && time.Duration(hb)*time.Second < p+time.Minute
			if got := eval(cond[1], schedule, hb); got != strconv.FormatBool(!refused) {
				t.Errorf("sweep_schedule %q, heartbeat_timeout %d: terraform's precondition %s, want %v (the function refuses: %v)", schedule, hb, got, !refused, refused)
			}
		}
	}
}
