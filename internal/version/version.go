// Package version says which build of node-drainer is running: the release
// name stamped by the Makefile, or else what the Go toolchain recorded.
package version

import (
	"runtime/debug"
	"sync"
)

// Version is set at link time by the Makefile:
//
//	-ldflags '-X github.com/node-drainer/node-drainer/internal/version.Version=v1.2.0'
//
// from `git describe --tags --always --dirty`. Empty in a plain `go build`.
var Version string

// Dev is the version of a build that carries no version at all.
const Dev = "dev"

var get = sync.OnceValue(func() string {
	info, _ := debug.ReadBuildInfo()
	return resolve(Version, info)
})

// Get returns the version of this binary: Version when set; else, from the
// build information, the main module's version (a tagged `go install`) or
// the VCS revision (12 hex digits, "-dirty" when the tree had changes);
// else "dev".
func Get() string { return get() }

func resolve(stamped string, info *debug.BuildInfo) string {
	if stamped != "" {
		return stamped
	}
	if info == nil {
		return Dev
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return Dev
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return rev + dirty
}
