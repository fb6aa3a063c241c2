package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Binaries locates the control-plane binaries and kwok's stage files.
type Binaries struct {
	Dir string // holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, stages/
}

func (b Binaries) path(name string) string { return filepath.Join(b.Dir, name) }

// EnsureBinaries returns the harness's binaries, building them from the tools
// module on first use (about 8 minutes on 2 cores; cached by version in
// $NODE_DRAINER_TOOLS_CACHE, default ~/.cache/node-drainer/tools).
// NODE_DRAINER_TOOLS_BIN names a directory of ready binaries instead.
func EnsureBinaries(ctx context.Context) (Binaries, error) {
	if dir := os.Getenv("NODE_DRAINER_TOOLS_BIN"); dir != "" {
		return Binaries{Dir: dir}, checkBinaries(dir)
	}
	script, err := buildScript()
	if err != nil {
		return Binaries{}, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("building the harness binaries with %s failed (it needs Go and the module proxy): %w\n%s", script, err, stderr.String())
	}
	dir := strings.TrimSpace(stdout.String())
	return Binaries{Dir: dir}, checkBinaries(dir)
}

func checkBinaries(dir string) error {
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "stages"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("harness component %s missing in %s (run `make tools`): %w", name, dir, err)
		}
	}
	return nil
}

// RepoRoot is the node-drainer checkout this harness belongs to.
func RepoRoot() (string, error) {
	script, err := buildScript()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(script), "..", ".."), nil
}

// buildScript finds hack/tools/build.sh from this source file, or
// from the working directory upwards (binaries built with -trimpath).
func buildScript() (string, error) {
	const rel = "hack/tools/build.sh"
	if _, file, _, ok := runtime.Caller(0); ok {
		p := filepath.Join(filepath.Dir(file), "..", "..", rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cannot find %s: run from the node-drainer repository", rel)
		}
		dir = parent
	}
}
