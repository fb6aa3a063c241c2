package version

import (
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
