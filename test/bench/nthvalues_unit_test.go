package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// docs/migrating-from-nth.md maps every value of the peer's Helm chart (the
// values.yaml of aws-node-termination-handler at the version
// hack/tools/nth.sh builds for the bench) to node-drainer's settings, one
// table row per value or group of values. The chart comes from the Go module
// the bench already fetches (go mod download, the module proxy or the module
// cache).

const (
	nthModule     = "github.com/aws/aws-node-termination-handler"
	nthValuesPath = "config/helm/aws-node-termination-handler/values.yaml"
	migrationDoc  = "../../docs/migrating-from-nth.md"
	// nthTableHeader starts each table of the doc that maps the chart's
	// values: its first column names them, each written `a.b.c`.
	nthTableHeader = "| NTH value |"
)

// A key of the chart missing from the doc's tables fails, and so does a row
// naming a key the chart does not have, or one key named twice.
func TestMigrationDocMapsEveryNTHChartValue(t *testing.T) {
	version := nthVersion(t)
	dir := nthModuleDir(t, version)
	values, err := os.ReadFile(filepath.Join(dir, nthValuesPath))
	if err != nil {
		t.Fatalf("the chart's values of %s@%s: %v", nthModule, version, err)
	}
	keys, err := valueKeys(values)
	if err != nil {
		t.Fatalf("%s of %s@%s: %v", nthValuesPath, nthModule, version, err)
	}
	doc, err := os.ReadFile(migrationDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), version) {
		t.Errorf("%s does not name NTH %s, the version hack/tools/nth.sh builds: map that version's chart", migrationDoc, version)
	}
	rows, err := tableKeys(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", migrationDoc, err)
	}
	for _, k := range keys {
		if _, ok := rows[k.name]; !ok {
			t.Errorf("%s@%s's values.yaml line %d: %s is in no table of %s (a row %s `%s` |)", nthModule, version, k.line, k.name, migrationDoc, nthTableHeader[:1], k.name)
		}
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k.name] = true
	}
	for name, lines := range rows {
		if !known[name] {
			t.Errorf("%s line %d: %s is no value of %s@%s's chart", migrationDoc, lines[0], name, nthModule, version)
		}
		if len(lines) > 1 {
			t.Errorf("%s lines %v: %s named more than once", migrationDoc, lines, name)
		}
	}
	if !t.Failed() {
		t.Logf("%d values of %s@%s's chart, each in %s", len(keys), nthModule, version, migrationDoc)
	}
}

// The flattening the test relies on: a mapping is followed down to its
// leaves (a.b.c); a scalar, a null, a list or an empty mapping is a leaf (a
// list's entries are its value, not keys of their own).
func TestValueKeys(t *testing.T) {
	keys, err := valueKeys([]byte(`
image:
  repository: x
  pullSecrets: []
name:
resources: {}
probes:
  httpGet:
    path: /healthz
affinity:
  nodeAffinity:
    terms:
      - key: a
        values: [b]
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range keys {
		got = append(got, fmt.Sprintf("%s:%d", k.name, k.line))
	}
	want := []string{"image.repository:3", "image.pullSecrets:4", "name:5", "resources:6", "probes.httpGet.path:9", "affinity.nodeAffinity.terms:12"}
	if !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	if _, err := valueKeys([]byte("- a\n- b\n")); err == nil {
		t.Error("a list at the top: no error, want one (the chart's values are a mapping)")
	}
}

// The doc's rows: several tables may share the header; a cell may name
// several keys; a key outside the first column is not a row.
func TestTableKeys(t *testing.T) {
	rows, err := tableKeys("text `notAKey`\n\n| NTH value | default | node-drainer |\n|---|---|---|\n| `a.b`, `c` | 1 | `d` |\n\nmore\n\n| NTH value | x |\n|---|---|\n| `e` | `f` |\n| `a.b` | again |\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{"a.b": {5, 12}, "c": {5}, "e": {11}}
	if len(rows) != len(want) {
		t.Errorf("rows %v, want %v", rows, want)
	}
	for k, lines := range want {
		if !slices.Equal(rows[k], lines) {
			t.Errorf("%s on lines %v, want %v", k, rows[k], lines)
		}
	}
	if _, err := tableKeys("| NTH value | x |\n|---|---|\n| no key | y |\n"); err == nil {
		t.Error("a row naming no key: no error, want one")
	}
	if _, err := tableKeys("no table\n"); err == nil {
		t.Error("no table: no error, want one")
	}
}

// nthVersion is the version hack/tools/nth.sh builds (its default).
func nthVersion(t *testing.T) string {
	t.Helper()
	script, err := os.ReadFile("../../hack/tools/nth.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version=\$\{NTH_VERSION:-(v[0-9][^}]*)\}$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("hack/tools/nth.sh has no line version=${NTH_VERSION:-v...}")
	}
	return string(m[1])
}

// nthModuleDir is the module's directory in the module cache, downloaded
// first if need be (as hack/tools/nth.sh does), outside this repository's
// modules so that neither go.mod changes.
func nthModuleDir(t *testing.T, version string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", nthModule+"@"+version)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(stdout.Bytes(), &mod); err != nil || jerr != nil || mod.Error != "" || mod.Dir == "" {
		t.Fatalf("go mod download %s@%s (it needs the module proxy or the module cache): %v %s %s%s", nthModule, version, err, mod.Error, stderr.String(), stdout.String())
	}
	return mod.Dir
}

// valueKey is a key of the chart's values, flattened, and its line.
type valueKey struct {
	name string
	line int
}

// valueKeys flattens a values.yaml: nested keys as a.b.c, in the file's
// order. A mapping is followed down; anything else (a scalar, a null, a list,
// an empty mapping) ends a key.
func valueKeys(data []byte) ([]valueKey, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping")
	}
	var keys []valueKey
	var walk func(prefix string, m *yaml.Node)
	walk = func(prefix string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			name := prefix + k.Value
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				walk(name+".", v)
				continue
			}
			keys = append(keys, valueKey{name: name, line: k.Line})
		}
	}
	walk("", doc.Content[0])
	return keys, nil
}

// tableKeys reads the keys named in the first column of every table of doc
// whose header starts with nthTableHeader, and the lines naming each.
func tableKeys(doc string) (map[string][]int, error) {
	rows := map[string][]int{}
	code := regexp.MustCompile("`([^`]+)`")
	lines := strings.Split(doc, "\n")
	tables := 0
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(strings.TrimSpace(lines[i]), nthTableHeader) {
			continue
		}
		tables++
		for i += 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
			first := strings.Split(strings.Trim(strings.TrimSpace(lines[i]), "|"), "|")[0]
			named := code.FindAllStringSubmatch(first, -1)
			if len(named) == 0 {
				return nil, fmt.Errorf("line %d: the first cell names no `key`", i+1)
			}
			for _, m := range named {
				rows[m[1]] = append(rows[m[1]], i+1)
			}
		}
	}
	if tables == 0 {
		return nil, fmt.Errorf("no table starting with %q", nthTableHeader)
	}
	return rows, nil
}
