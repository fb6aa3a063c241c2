package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The ratchet: each way an allowance can go wrong fails, saying what to do,
// and code within the limits or within its allowance passes.
func TestCheck(t *testing.T) {
	fn := func(name string) key { return key{kindFunc, name} }
	for _, tc := range []struct {
		name         string
		sizes, allow map[key]int
		want         string // "" for no problem
	}{
		{"within the limit", map[key]int{fn("p.F"): 60}, nil, ""},
		{"over, no allowance", map[key]int{fn("p.F"): 61}, nil, "over the limit of 60"},
		{"at its allowance", map[key]int{fn("p.F"): 70}, map[key]int{fn("p.F"): 70}, ""},
		{"grew", map[key]int{fn("p.F"): 71}, map[key]int{fn("p.F"): 70}, "grew past its allowance of 70"},
		{"shrank", map[key]int{fn("p.F"): 65}, map[key]int{fn("p.F"): 70}, "lower the allowance to 65"},
		{"within the limit now", map[key]int{fn("p.F"): 60}, map[key]int{fn("p.F"): 70}, "now within the limit of 60: remove"},
		{"gone", nil, map[key]int{fn("p.F"): 70}, "gone: remove"},
		{"a type", map[key]int{{kindType, "p.T"}: 26}, nil, "26 methods, over the limit of 25"},
		{"a file", map[key]int{{kindFile, "p/f.go"}: 500}, map[key]int{{kindFile, "p/f.go"}: 520}, "now within the limit of 500: remove"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := check(tc.sizes, tc.allow)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("check = %q, want no problem", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("check = %q, want one problem saying %q", got, tc.want)
			}
		})
	}
}

// -shrink lowers and drops, never raises or adds.
func TestShrunk(t *testing.T) {
	fn := func(name string) key { return key{kindFunc, name} }
	sizes := map[key]int{fn("p.Shrank"): 65, fn("p.Grew"): 90, fn("p.Small"): 10, fn("p.New"): 99}
	allow := map[key]int{fn("p.Shrank"): 70, fn("p.Grew"): 80, fn("p.Small"): 70, fn("p.Gone"): 70}
	got := shrunk(sizes, allow)
	want := map[key]int{fn("p.Shrank"): 65, fn("p.Grew"): 80}
	if len(got) != len(want) || got[fn("p.Shrank")] != 65 || got[fn("p.Grew")] != 80 {
		t.Errorf("shrunk = %v, want %v", got, want)
	}
}

// The measures on a package written here: a method on a pointer and on a
// generic receiver count for their type, a function's lines run from func to
// its closing brace, tests are not product code.
func TestMeasure(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, text string) {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("internal/p/p.go", "package p\n\ntype T struct{}\n\nfunc (T) A() {}\n\nfunc (*T) B() {\n\t_ = 1\n}\n\ntype G[K any] struct{}\n\nfunc (g *G[K]) C() {}\n\nfunc F() {\n}\n")
	write("internal/p/p_test.go", "package p\n\nfunc (T) D() {}\n")
	write("functions/m/main.go", "package main\n\nfunc main() {}\n")
	sizes, err := measure(dir)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[key]int{
		{kindType, "internal/p.T"}:     2,
		{kindType, "internal/p.G"}:     1,
		{kindFunc, "internal/p.T.B"}:   3,
		{kindFunc, "internal/p.F"}:     2,
		{kindFunc, "functions/m.main"}: 1,
		{kindFile, "internal/p/p.go"}:  16,
	} {
		if sizes[k] != want {
			t.Errorf("%s = %d, want %d", k, sizes[k], want)
		}
	}
	if _, ok := sizes[key{kindFunc, "internal/p.T.D"}]; ok {
		t.Errorf("a _test.go file was measured")
	}
}
