package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The repository's template.yaml holds the body its definition gives (the
// check `make deploy-check` runs).
func TestTemplateCurrent(t *testing.T) {
	def, tmpl := read(t, "..", "..", definitionFile), read(t, "..", "..", samFile)
	got, err := generate(tmpl, def)
	if err != nil {
		t.Fatal(err)
	}
	if got != tmpl {
		t.Error(staleMessage(tmpl, got))
	}
}

// A stale copy fails the check and names the line; writing it mends it and
// touches nothing else of the template.
func TestStale(t *testing.T) {
	def, tmpl := read(t, "..", "..", definitionFile), read(t, "..", "..", samFile)
	edited := strings.Replace(def, `"title": "`, `"title": "stale `, 1)
	if edited == def {
		t.Fatal("the definition has no widget title")
	}
	got, err := generate(tmpl, edited)
	if err != nil {
		t.Fatal(err)
	}
	if got == tmpl {
		t.Fatal("an edited definition gives the same template: the check could not fail")
	}
	msg := staleMessage(tmpl, got)
	if !strings.Contains(msg, "is stale") || !strings.Contains(msg, `"title": "stale `) {
		t.Errorf("the message does not say what is stale: %s", msg)
	}
	if strings.Count(got, "\n") != strings.Count(tmpl, "\n") || strings.Replace(got, `"title": "stale `, `"title": "`, 1) != tmpl {
		t.Error("writing the body changed more of the template than the edited line")
	}
}

func TestSAMBody(t *testing.T) {
	for _, tc := range []struct{ def, want, err string }{
		{`"${function_name}" "${region}"`, `"${FunctionName}" "${AWS::Region}"`, ""},
		{`"label": "$${PROP('Dim.Event')}"`, `"label": "${!PROP('Dim.Event')}"`, ""},
		{`"x": "${var.function_name}"`, "", "${var.function_name}"},
		{`%{ if true }x%{ endif }`, "", "%{"},
		{`"${region"`, "", "${region"},
	} {
		got, err := samBody(tc.def)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.def, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one naming %s", tc.def, err, tc.err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%s: %s, want %s", tc.def, got, tc.want)
		}
	}
}

func TestSplice(t *testing.T) {
	tmpl := "a:\n  Dashboard:\n    DashboardBody: !Sub |\n      old\n\n      older\n\n  Next: 1\n"
	got, err := splice(tmpl, "{\n  new\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "a:\n  Dashboard:\n    DashboardBody: !Sub |\n      {\n        new\n      }\n\n  Next: 1\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := splice("a: 1\n", "{}"); err == nil {
		t.Error("a template without DashboardBody: no error")
	}
}

func read(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
