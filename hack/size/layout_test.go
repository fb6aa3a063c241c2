package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CONTRIBUTING.md's layout table names every folder of internal/, test/
// and hack/: a package that lands without a row fails here.
func TestLayoutTableNamesEveryFolder(t *testing.T) {
	doc, err := os.ReadFile("../../CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{"internal", "test", "hack"} {
		entries, err := os.ReadDir(filepath.Join("../..", root))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			row := "| `" + root + "/" + e.Name() + "`"
			if !strings.Contains(string(doc), row) {
				t.Errorf("CONTRIBUTING.md's layout table has no row %s |: say what the folder is for", row)
			}
		}
	}
}
