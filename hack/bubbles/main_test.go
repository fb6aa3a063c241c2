package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each case is a package of one file: the reactors the check must find
// (by line), and those it must leave alone.
func TestCheck(t *testing.T) {
	const bubble = "package p\n\nimport (\n\t\"testing/synctest\"\n\t\"time\"\n)\n\nvar _ = synctest.Test\n\n"
	for _, tc := range []struct {
		name, src string
		want      []string // "file.go:line: a reactor ..."
	}{
		{"a sleep in a bubble's package", bubble + "func f(c fake) {\n\tc.PrependReactor(\"get\", \"nodes\", func(a action) (bool, obj, error) {\n\t\ttime.Sleep(time.Second)\n\t\treturn false, nil, nil\n\t})\n}\n",
			[]string{"p.go:12:3: a reactor sleeps"}},
		{"a receive", bubble + "func f(c fake, ch chan int) {\n\tc.AddWatchReactor(\"pods\", func(a action) (bool, obj, error) {\n\t\t<-ch\n\t\treturn false, nil, nil\n\t})\n}\n",
			[]string{"p.go:12:3: a reactor receives from a channel"}},
		{"a select without default", bubble + "func f(c fake, ch chan int) {\n\tc.PrependReactor(\"*\", \"*\", func(a action) (bool, obj, error) {\n\t\tselect {\n\t\tcase <-ch:\n\t\t}\n\t\treturn false, nil, nil\n\t})\n}\n",
			[]string{"p.go:12:3: a reactor selects without a default"}},
		{"a WaitGroup's Wait", bubble + "func f(c fake, wg interface{ Wait() }) {\n\tc.PrependReactor(\"*\", \"*\", func(a action) (bool, obj, error) {\n\t\twg.Wait()\n\t\treturn false, nil, nil\n\t})\n}\n",
			[]string{"p.go:12:3: a reactor waits"}},
		{"a select with a default", bubble + "func f(c fake, ch chan int) {\n\tc.PrependReactor(\"*\", \"*\", func(a action) (bool, obj, error) {\n\t\tselect {\n\t\tcase <-ch:\n\t\tdefault:\n\t\t}\n\t\treturn false, nil, nil\n\t})\n}\n",
			nil},
		{"a goroutine the reactor starts", bubble + "func f(c fake) {\n\tc.PrependReactor(\"*\", \"*\", func(a action) (bool, obj, error) {\n\t\tgo func() { time.Sleep(time.Second) }()\n\t\treturn false, nil, nil\n\t})\n}\n",
			nil},
		{"a sleep outside any reactor", bubble + "func f() { time.Sleep(time.Second) }\n", nil},
		{"bubbles of clustertest.Bubble", "package p\n\nimport (\n\t\"time\"\n\n\t\"github.com/node-drainer/node-drainer/internal/cluster/clustertest\"\n)\n\nvar _ = clustertest.InBubble\n\nfunc f(c fake) {\n\tc.PrependReactor(\"get\", \"nodes\", func(a action) (bool, obj, error) {\n\t\ttime.Sleep(time.Second)\n\t\treturn false, nil, nil\n\t})\n}\n",
			[]string{"p.go:13:3: a reactor sleeps"}},
		{"clustertest without its bubbles", "package p\n\nimport (\n\t\"time\"\n\n\t\"github.com/node-drainer/node-drainer/internal/cluster/clustertest\"\n)\n\nvar _ = clustertest.Outside{}\n\nfunc f(c fake) {\n\tc.PrependReactor(\"get\", \"nodes\", func(a action) (bool, obj, error) {\n\t\ttime.Sleep(time.Second)\n\t\treturn false, nil, nil\n\t})\n}\n",
			nil},
		{"a package without bubbles", "package p\n\nimport \"time\"\n\nfunc f(c fake) {\n\tc.PrependReactor(\"get\", \"nodes\", func(a action) (bool, obj, error) {\n\t\ttime.Sleep(time.Second)\n\t\treturn false, nil, nil\n\t})\n}\n",
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			found, err := check([]string{dir})
			if err != nil {
				t.Fatal(err)
			}
			for i := range found {
				found[i] = strings.TrimPrefix(found[i], dir+string(filepath.Separator))
			}
			if strings.Join(found, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("found %q, want %q", found, tc.want)
			}
		})
	}
}

// The reactor of a helper file counts when another file of the package
// starts the bubbles.
func TestCheckHelperFiles(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"a_test.go": "package p\n\nimport \"testing/synctest\"\n\nvar _ = synctest.Test\n",
		"fakes.go":  "package p\n\nimport \"time\"\n\nfunc f(c fake) {\n\tc.PrependReactor(\"get\", \"nodes\", func(a action) (bool, obj, error) {\n\t\ttime.Sleep(time.Second)\n\t\treturn false, nil, nil\n\t})\n}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := check([]string{dir})
	if err != nil || len(found) != 1 || !strings.HasSuffix(found[0], "fakes.go:7:3: a reactor sleeps") {
		t.Errorf("found %q (%v), want the helper file's sleeping reactor", found, err)
	}
}

// -tests names the packages whose tests call synctest.Test, and those
// tests, and no other.
func TestPrintBubbleTests(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, "p")
	if err := os.Mkdir(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "package p\n\nimport (\n\t\"testing\"\n\t\"testing/synctest\"\n)\n\n" +
		"func TestB(t *testing.T) { synctest.Test(t, func(t *testing.T) {}) }\n" +
		"func TestA(t *testing.T) { t.Run(\"x\", func(t *testing.T) { synctest.Test(t, func(*testing.T) {}) }) }\n" +
		"func TestPlain(t *testing.T) {}\n"
	if err := os.WriteFile(filepath.Join(pkg, "p_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "q_test.go"), []byte("package q\n\nimport \"testing/synctest\"\n\nfunc TestC(t *testing.T) { synctest.Test(t, nil) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := printBubbleTests(&out, []string{dir}); err != nil {
		t.Fatal(err)
	}
	want := "./" + filepath.ToSlash(dir) + " ./" + filepath.ToSlash(pkg) + " ^(TestA|TestB|TestC)$\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
