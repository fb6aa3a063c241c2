package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// functionPkg is the Lambda's main package; its import graph is what ships.
const functionPkg = "./functions/node-drainer"

// linkPlatforms are the platforms the function's import graph is listed on.
// The function ships for linux/arm64 and linux/amd64; go.mod also records
// the modules of other platforms (go mod tidy ignores build constraints:
// cobra and moby/term pull two Windows-only modules), hence windows/amd64.
var linkPlatforms = []string{"linux/arm64", "linux/amd64", "windows/amd64"}

// testOnlyModules are the modules the tests use and the function does not
// (issue 30): named so a failure says which one came back.
var testOnlyModules = []string{
	"github.com/hashicorp/hcl/v2",
	"github.com/zclconf/go-cty",
	"gopkg.in/yaml.v3", // archived; the tests use go.yaml.in/yaml/v3
	"github.com/aws/aws-sdk-go-v2/service/cloudformation",
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch",
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs",
	"github.com/aws/aws-sdk-go-v2/service/iam",
	"github.com/aws/aws-sdk-go-v2/service/s3",
	"github.com/aws/aws-sdk-go-v2/service/sqs",
}

// The product's module (go.mod at the root) holds what the Lambda links and
// nothing else: it is tidy, and every module it requires, direct or
// indirect, provides a package of the function's import graph (tests
// excluded), listed with the product's module alone (GOWORK=off, as `make
// build`). The tests' libraries live in test/go.mod.
func TestProductModuleHoldsWhatTheFunctionLinks(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	mf := parseGoMod(t, filepath.Join(root, "go.mod"))
	if mf.Module.Mod.Path != "github.com/node-drainer/node-drainer" {
		t.Fatalf("go.mod at %s is module %q, not the product's", root, mf.Module.Mod.Path)
	}
	linked := functionModules(t, root)
	if len(linked) < 10 || !linked["github.com/aws/aws-lambda-go"] || !linked["k8s.io/client-go"] {
		t.Fatalf("the function's import graph looks wrong (%d modules): %v", len(linked), keys(linked))
	}

	if out, err := goCmd(root, "", "", "mod", "tidy", "-diff"); err != nil {
		t.Errorf("go.mod is not tidy (GOWORK=off go mod tidy): %v\n%s", err, out)
	}
	for _, p := range requirementProblems(mf, linked) {
		t.Error(p)
	}
	for _, m := range testOnlyModules {
		if linked[m] {
			t.Errorf("%s is linked into the function: the list of test-only modules is stale", m)
		}
	}
	if !t.Failed() {
		t.Logf("go.mod: %d requirements, each linked by %s; none of %d test-only modules", len(mf.Require), functionPkg, len(testOnlyModules))
	}

	// The check fails when go.mod alone changes: a test-only module
	// required, directly or as // indirect.
	for _, m := range []string{"github.com/hashicorp/hcl/v2", "gopkg.in/yaml.v3", "github.com/aws/aws-sdk-go-v2/service/sqs"} {
		for _, indirect := range []bool{false, true} {
			bad := parseGoMod(t, filepath.Join(root, "go.mod"))
			bad.AddNewRequire(m, "v1.0.0", indirect)
			if ps := requirementProblems(bad, linked); !slices.ContainsFunc(ps, func(p string) bool { return strings.Contains(p, m) }) {
				t.Errorf("teeth: go.mod requiring %s (indirect=%v) is not reported: %v", m, indirect, ps)
			}
		}
	}
}

// requirementProblems lists each requirement of mf that the function does
// not link.
func requirementProblems(mf *modfile.File, linked map[string]bool) []string {
	var ps []string
	for _, r := range mf.Require {
		if !linked[r.Mod.Path] {
			ps = append(ps, fmt.Sprintf("go.mod requires %s %s, which %s does not link (on %v): a test-only dependency belongs in test/go.mod",
				r.Mod.Path, r.Mod.Version, functionPkg, linkPlatforms))
		}
	}
	return ps
}

// functionModules lists, with the product's module alone, the modules of
// every package the function links on linkPlatforms.
func functionModules(t *testing.T, root string) map[string]bool {
	t.Helper()
	linked := map[string]bool{}
	for _, p := range linkPlatforms {
		goos, goarch, _ := strings.Cut(p, "/")
		args := []string{"list", "-tags", "lambda.norpc", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", functionPkg}
		out, err := goCmd(root, goos, goarch, args...)
		if err != nil {
			t.Fatalf("GOWORK=off GOOS=%s GOARCH=%s go %s: %v\n%s", goos, goarch, strings.Join(args, " "), err, out)
		}
		for _, m := range strings.Fields(string(out)) {
			linked[m] = true
		}
	}
	delete(linked, "github.com/node-drainer/node-drainer")
	return linked
}

// goCmd runs go in root with the product's module alone (GOWORK=off), for
// goos/goarch when given; it returns stdout, or stderr on failure.
func goCmd(root, goos, goarch string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	if goos != "" {
		cmd.Env = append(cmd.Env, "GOOS="+goos, "GOARCH="+goarch)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), err
	}
	return out, nil
}

func parseGoMod(t *testing.T, path string) *modfile.File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
