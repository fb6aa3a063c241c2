package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const releaseWorkflow = ".github/workflows/release.yml"

// workflow is the part of a GitHub Actions workflow the release's rules read
// (actionlint, in check.sh, checks the syntax and the rest).
type workflow struct {
	On struct {
		Push struct {
			Tags []string `yaml:"tags"`
		} `yaml:"push"`
	} `yaml:"on"`
	Permissions map[string]string `yaml:"permissions"`
	Jobs        map[string]*job   `yaml:"jobs"`
}

type job struct {
	Needs       any               `yaml:"needs"` // a string or a list
	Permissions map[string]string `yaml:"permissions"`
	Steps       []step            `yaml:"steps"`
}

type step struct {
	Uses string            `yaml:"uses"`
	Run  string            `yaml:"run"`
	With map[string]string `yaml:"with"`
}

// needs lists the jobs j waits for.
func (j *job) needs() []string {
	switch n := j.Needs.(type) {
	case string:
		return []string{n}
	case []any:
		var out []string
		for _, v := range n {
			out = append(out, fmt.Sprint(v))
		}
		return out
	}
	return nil
}

// runs is the index of the first step whose run: contains cmd, or -1.
func (j *job) runs(cmd string) int {
	return slices.IndexFunc(j.Steps, func(s step) bool {
		return strings.Contains(s.Run, cmd)
	})
}

// releaseProblems checks the release's order: a tag v* triggers it; the
// job that publishes waits for one that runs `make test`; it runs `make dist`,
// checks SHA256SUMS, then creates the release with the files SHA256SUMS
// lists and SHA256SUMS; only that job may write the repository's contents.
func releaseProblems(w *workflow) []string {
	var ps []string
	if !slices.Equal(w.On.Push.Tags, []string{"v*"}) {
		ps = append(ps, fmt.Sprintf("on.push.tags is %q, want [v*]", w.On.Push.Tags))
	}
	if w.Permissions["contents"] != "read" {
		ps = append(ps, fmt.Sprintf("the workflow's permissions give contents %q, want read (write only on the publishing job)", w.Permissions["contents"]))
	}
	var publish, testJob string
	for name, j := range w.Jobs {
		if j.runs("gh release create") >= 0 {
			publish = name
		}
		if slices.ContainsFunc(j.Steps, func(s step) bool {
			return strings.TrimSpace(s.Run) == "make test"
		}) {
			testJob = name
		}
		if j.Permissions["contents"] == "write" && j.runs("gh release create") < 0 {
			ps = append(ps, fmt.Sprintf("job %s may write contents but publishes nothing", name))
		}
	}
	if testJob == "" {
		ps = append(ps, "no job runs `make test`")
	}
	if publish == "" {
		return append(ps, "no job runs `gh release create`")
	}
	p := w.Jobs[publish]
	if testJob != "" && testJob != publish && !slices.Contains(p.needs(), testJob) {
		ps = append(ps, fmt.Sprintf("job %s publishes without waiting for %s (make test): needs is %v", publish, testJob, p.needs()))
	}
	if p.Permissions["contents"] != "write" {
		ps = append(ps, fmt.Sprintf("job %s publishes without contents: write", publish))
	}
	dist, sums, create := p.runs("make dist"), p.runs("sha256sum -c SHA256SUMS"), p.runs("gh release create")
	switch {
	case dist < 0:
		ps = append(ps, fmt.Sprintf("job %s does not run `make dist`", publish))
	case sums < 0:
		ps = append(ps, fmt.Sprintf("job %s does not check the files (sha256sum -c SHA256SUMS)", publish))
	case !(dist < sums && sums < create):
		ps = append(ps, fmt.Sprintf("job %s runs make dist (step %d), the check (step %d) and the release (step %d) out of order", publish, dist, sums, create))
	}
	if run := p.Steps[create].Run; !strings.Contains(run, "dist/SHA256SUMS") || !strings.Contains(run, "$GITHUB_REF_NAME") {
		ps = append(ps, fmt.Sprintf("job %s's release step does not publish dist/SHA256SUMS and its files under the tag's name:\n%s", publish, run))
	}
	return ps
}

// The release workflow publishes only what passed `make test`, built by
// `make dist`, with its checksums.
func TestReleaseWorkflow(t *testing.T) {
	load := func() *workflow {
		b, err := os.ReadFile(filepath.Join(repoRoot, releaseWorkflow))
		if err != nil {
			t.Fatal(err)
		}
		var w workflow
		if err := yaml.Unmarshal(b, &w); err != nil {
			t.Fatalf("%s: %v", releaseWorkflow, err)
		}
		return &w
	}
	for _, p := range releaseProblems(load()) {
		t.Errorf("%s: %s", releaseWorkflow, p)
	}

	// each rule fails when the workflow alone changes
	mutations := map[string]func(w *workflow){
		"published without waiting for the tests": func(w *workflow) {
			for _, j := range w.Jobs {
				j.Needs = nil
			}
		},
		"on every branch push": func(w *workflow) { w.On.Push.Tags = nil },
		"no make test": func(w *workflow) {
			for _, j := range w.Jobs {
				for i := range j.Steps {
					j.Steps[i].Run = strings.ReplaceAll(j.Steps[i].Run, "make test", "make unit")
				}
			}
		},
		"no checksum check": func(w *workflow) {
			for _, j := range w.Jobs {
				for i := range j.Steps {
					j.Steps[i].Run = strings.ReplaceAll(j.Steps[i].Run, "sha256sum -c", "ls")
				}
			}
		},
		"write everywhere": func(w *workflow) { w.Permissions["contents"] = "write" },
	}
	for name, mutate := range mutations {
		w := load()
		mutate(w)
		if len(releaseProblems(w)) == 0 {
			t.Errorf("teeth: the workflow %s passes", name)
		}
	}
}
