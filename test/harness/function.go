package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
)

// BootstrapEnv names a bootstrap built already (by `make`, once for every
// suite of a run: the Makefile's HARNESS_BOOTSTRAP) that BuildBootstrap
// returns instead of building its own.
const BootstrapEnv = "NODE_DRAINER_BOOTSTRAP"

// BuildBootstrap builds the real function binary (as `make build` does, for
// this machine's architecture) into dir and returns its path; with
// $NODE_DRAINER_BOOTSTRAP set, it returns that one.
func BuildBootstrap(ctx context.Context, dir string) (string, error) {
	if b := os.Getenv(BootstrapEnv); b != "" {
		if st, err := os.Stat(b); err != nil || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s: not an executable bootstrap (%v)", BootstrapEnv, b, err)
		}
		return b, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "bootstrap")
	// the Makefile's HARNESS_BOOTSTRAP recipe: no -trimpath, so that it
	// reuses the packages the tests compiled
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-ldflags=-s -w", "-o", out, "./functions/node-drainer")
	cmd.Dir = root
	// the product's module alone (GOWORK=off), as `make build`: the binary
	// the tests run is built from the dependencies the release ships
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building bootstrap: %w\n%s", err, b)
	}
	return out, nil
}

// FunctionOptions configure StartFunction.
type FunctionOptions struct {
	Bootstrap string
	Timeout   time.Duration // the function timeout (default 60 s)
	Env       []string      // extra configuration, NAME=value
	Log       io.Writer     // the function's logs
	// AsyncRetries is how many more times Lambda runs a failed
	// asynchronous invocation (lambdart.Options.AsyncRetries; 0: none).
	AsyncRetries int
}

// StartFunction runs the bootstrap under the Lambda runtime emulator, as the
// drainer role, against this harness (see DrainerEnv).
func (e *Env) StartFunction(ctx context.Context, o FunctionOptions) (*lambdart.Runtime, error) {
	env, err := e.DrainerEnv(ctx, o.Env...)
	if err != nil {
		return nil, err
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	return lambdart.Start(ctx, lambdart.Options{
		Bootstrap:    o.Bootstrap,
		Env:          env,
		Timeout:      o.Timeout,
		FunctionName: "node-drainer",
		MemoryMB:     256,
		Log:          o.Log,
		AsyncRetries: o.AsyncRetries,
	})
}

// Invoke invokes the function synchronously; a function error is returned
// as an error carrying the function's message.
func Invoke(ctx context.Context, rt *lambdart.Runtime, payload []byte) (handler.Outcome, error) {
	res, err := rt.Invoke(ctx, payload)
	if err != nil {
		return handler.Outcome{}, err
	}
	if res.FunctionError != "" {
		return handler.Outcome{}, fmt.Errorf("function error: %s", res.Payload)
	}
	var o handler.Outcome
	if err := json.Unmarshal(res.Payload, &o); err != nil {
		return handler.Outcome{}, fmt.Errorf("decoding outcome %s: %w", res.Payload, err)
	}
	return o, nil
}

// Main is a test package's TestMain body: one harness and the real bootstrap
// for the package (set in *env and *bootstrap), its tests, then the harness
// stopped. A harness that cannot start fails the package and says what to
// install.
func Main(m *testing.M, env **Env, bootstrap *string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e, b, err := StartWithFunction(ctx, Options{Log: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v (the harness needs `make tools` and python3 with moto[server]; see docs/testing.md)\n", err)
		return 1
	}
	defer e.Stop()
	*env, *bootstrap = e, b
	return m.Run()
}

// StartWithFunction starts a harness and builds the real bootstrap into the
// harness's directory: what a test package's TestMain needs. On error nothing
// is left running.
func StartWithFunction(ctx context.Context, opts Options) (*Env, string, error) {
	e, err := Start(ctx, opts)
	if err != nil {
		return nil, "", fmt.Errorf("starting the harness: %w", err)
	}
	bootstrap, err := BuildBootstrap(ctx, e.Dir)
	if err != nil {
		e.Stop()
		return nil, "", err
	}
	return e, bootstrap, nil
}
