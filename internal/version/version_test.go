package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tc := range []struct {
		name    string
		stamped string
		info    *debug.BuildInfo
		want    string
	}{
		{"stamped wins", "v1.2.0-3-gabc1234-dirty", vcs("6031a81f00000000000000000000000000000000", "true"), "v1.2.0-3-gabc1234-dirty"},
		{"stamped without build info", "v1.2.0", nil, "v1.2.0"},
		{"no build info", "", nil, Dev},
		{"module version of a tagged go install", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}}, "v1.3.0"},
		{"pseudo-version", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123140000-6031a81f0000+dirty"}}, "v0.0.0-20261123140000-6031a81f0000+dirty"},
		{"clean revision", "", vcs("6031a81f00000000000000000000000000000000", "false"), "6031a81f0000"},
		{"modified tree", "", vcs("6031a81f00000000000000000000000000000000", "true"), "6031a81f0000-dirty"},
		{"devel without vcs", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, Dev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolve(tc.stamped, tc.info); got != tc.want {
				t.Errorf("resolve(%q) = %q, want %q", tc.stamped, got, tc.want)
			}
		})
	}
}

func TestGetIsNeverEmpty(t *testing.T) {
	if Get() == "" {
		t.Fatal("Get() is empty")
	}
}

// The Makefile's link-time stamp reaches Get: the -X flag of its
// BUILD_FLAGS names Version (a variable renamed, moved or made a constant
// would leave every release without its version, and the linker says
// nothing). A small program is built, not the bootstrap: linking the
// bootstrap took 14 s of CPU, most of the unit tier's functions package;
// functions/node-drainer's TestBootstrapLogsVersionFirst runs the
// bootstrap's main with Version set.
func TestMakefileStampReachesGet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-X (\S+)=\$\(VERSION\)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile stamps no -X <variable>=$(VERSION)")
	}
	const stamped = "v0.0.0-test-stamp"
	bin := filepath.Join(t.TempDir(), "stamp")
	build := exec.Command("go", "build", "-ldflags", "-X "+string(m[1])+"="+stamped, "-o", bin, "./testdata/stamp")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got, err := exec.Command(bin).Output()
	if err != nil || string(got) != stamped {
		t.Errorf("the stamped program says %q (%v), want %q: the Makefile's -X %s does not reach Get", got, err, stamped, m[1])
	}
}
