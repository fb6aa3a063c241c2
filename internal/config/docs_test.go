package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/node-drainer/node-drainer/internal/config"
)

// configTableHeader starts the configuration table of docs/configuration.md:
// its first two columns are the variable and its default.
const configTableHeader = "| variable | default |"

// configRow is one row of the configuration table.
type configRow struct {
	name, def string
	line      int
}

// configRows parses the configuration table of doc: the one table whose
// header starts with configTableHeader. A variable is written `NAME`; a
// default is `value`, or the word empty.
func configRows(doc string) ([]configRow, error) {
	lines := strings.Split(doc, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), configTableHeader) {
			if start >= 0 {
				return nil, fmt.Errorf("two tables start with %q (lines %d and %d)", configTableHeader, start+1, i+1)
			}
			start = i
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no table starting with %q", configTableHeader)
	}
	var vars []configRow
	var errs []string
	for i := start + 2; i < len(lines); i++ { // skip the header and its |---| line
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) < 2 {
			errs = append(errs, fmt.Sprintf("line %d: fewer than two cells", i+1))
			continue
		}
		name, def := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1])
		if len(name) < 3 || !strings.HasPrefix(name, "`") || !strings.HasSuffix(name, "`") {
			errs = append(errs, fmt.Sprintf("line %d: variable %q is not written `NAME`", i+1, name))
			continue
		}
		name = strings.Trim(name, "`")
		switch {
		case def == "empty":
			def = ""
		case len(def) >= 3 && strings.HasPrefix(def, "`") && strings.HasSuffix(def, "`"):
			def = strings.Trim(def, "`")
		default:
			errs = append(errs, fmt.Sprintf("line %d: default %q of %s is neither `value` nor empty", i+1, def, name))
			continue
		}
		vars = append(vars, configRow{name: name, def: def, line: i + 1})
	}
	if len(errs) > 0 {
		return vars, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return vars, nil
}

// configTableProblems compares the configuration table of doc with vars.
func configTableProblems(doc string, vars []config.Var) []string {
	rows, err := configRows(doc)
	var out []string
	if err != nil {
		out = append(out, err.Error())
	}
	want := map[string]string{}
	for _, v := range vars {
		want[v.Name] = v.Default
	}
	seen := map[string]bool{}
	for _, r := range rows {
		def, ok := want[r.name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("line %d: %s is not in config.Vars", r.line, r.name))
		case seen[r.name]:
			out = append(out, fmt.Sprintf("line %d: %s is listed twice", r.line, r.name))
		case def != r.def:
			out = append(out, fmt.Sprintf("line %d: %s default %q, config.Vars says %q", r.line, r.name, r.def, def))
		}
		seen[r.name] = true
	}
	for _, v := range vars {
		if !seen[v.Name] {
			out = append(out, fmt.Sprintf("%s (default %q) is missing from the configuration table", v.Name, v.Default))
		}
	}
	return out
}

// configDoc holds the configuration table, relative to the repository root.
const configDoc = "docs/configuration.md"

// TestDocsConfigurationTable: the configuration table of docs/configuration.md
// lists every variable of config.Vars with its default, once, and nothing else.
func TestDocsConfigurationTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(configDoc)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range configTableProblems(string(b), config.Vars) {
		t.Error(configDoc + ": " + p)
	}
}

// The check fails when the documented table and config.Vars disagree.
func TestConfigTableProblemsDetectsDrift(t *testing.T) {
	vars := []config.Var{{Name: "A_VAR", Default: "1m"}, {Name: "B_VAR", Default: ""}}
	table := func(rows ...string) string {
		return "# x\n\n| variable | default | meaning |\n|---|---|---|\n" + strings.Join(rows, "\n") + "\n\nafter | not a row\n"
	}
	tests := []struct {
		name, doc, want string
	}{
		{"in agreement", table("| `A_VAR` | `1m` | a |", "| `B_VAR` | empty | b |"), ""},
		{"missing variable", table("| `A_VAR` | `1m` | a |"), "B_VAR (default \"\") is missing"},
		{"different default", table("| `A_VAR` | `2m` | a |", "| `B_VAR` | empty | b |"), "A_VAR default \"2m\", config.Vars says \"1m\""},
		{"empty documented as a value", table("| `A_VAR` | `1m` | a |", "| `B_VAR` | `x` | b |"), "B_VAR default \"x\""},
		{"unknown variable", table("| `A_VAR` | `1m` | a |", "| `B_VAR` | empty | b |", "| `C_VAR` | empty | c |"), "C_VAR is not in config.Vars"},
		{"listed twice", table("| `A_VAR` | `1m` | a |", "| `B_VAR` | empty | b |", "| `A_VAR` | `1m` | a |"), "A_VAR is listed twice"},
		{"default not quoted", table("| `A_VAR` | 1m | a |", "| `B_VAR` | empty | b |"), "neither `value` nor empty"},
		{"no table", "# x\n\nno table here\n", "no table starting with"},
		{"two tables", table("| `A_VAR` | `1m` | a |", "| `B_VAR` | empty | b |") + table(), "two tables"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(configTableProblems(tt.doc, vars), "\n")
			switch {
			case tt.want == "" && got != "":
				t.Errorf("problems:\n%s\nwant none", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Errorf("problems:\n%s\nwant one mentioning %q", got, tt.want)
			}
		})
	}
}
