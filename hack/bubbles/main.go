// Command bubbles finds reactors of client-go's fake clientset that block,
// in the packages whose tests run in testing/synctest bubbles.
//
//	GOWORK=off go run ./hack/bubbles            # from the repository root (make size)
//
// The fake clientset holds its lock while any reactor runs
// (k8s.io/client-go/testing, Fake.Invokes). A reactor that sleeps or waits
// there makes every other call on the clientset wait on that lock, and
// inside a bubble a goroutine waiting on a mutex is not durably blocked:
// the bubble's clock never moves again, the sleeping reactor never wakes,
// and the test hangs until its timeout, more often the busier the machine.
// Delay the caller outside the fake instead (clustertest.Outside).
//
// A reactor is a function literal passed to a method whose name ends in
// "Reactor" (PrependReactor, AddReactor, PrependWatchReactor, ...). It
// blocks when its body calls time.Sleep or a method Wait() with no
// arguments (sync.WaitGroup, sync.Cond), receives from a channel, or
// selects without a default. A send is not counted: the tests send on
// buffered channels. Every Go file of a package is checked when one of the
// package's files imports testing/synctest or calls clustertest.Bubble or
// InBubble (a reactor built in a helper file runs in the bubbles of the
// package's tests all the same). A reactor that blocks inside a function
// it calls is not found: the check reads the reactor's own body.
//
// It prints each blocking reactor as file:line and fails (exit 1) when
// there is one.
//
//	GOWORK=off go run ./hack/bubbles -tests     # the tests that run bubbles
//
// prints the packages of internal/ and functions/ whose tests call
// synctest.Test, clustertest.Bubble or InBubble, then a -run pattern of
// those tests, on one line: `make bubbles` runs them again and again
// (BUBBLE_COUNT), so that a bubble that can hang under load hangs there,
// not once in CI.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

var roots = []string{"internal", "functions", "test"}

func main() {
	tests := flag.Bool("tests", false, "print each package's tests that run bubbles: synctest.Test, clustertest.Bubble or InBubble (directory and -run pattern), and check nothing")
	flag.Parse()
	if *tests {
		if err := printBubbleTests(os.Stdout, []string{"internal", "functions"}); err != nil {
			fmt.Fprintln(os.Stderr, "bubbles:", err)
			os.Exit(2)
		}
		return
	}
	found, err := check(roots)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bubbles:", err)
		os.Exit(2)
	}
	for _, f := range found {
		fmt.Println(f)
	}
	if len(found) > 0 {
		fmt.Printf("bubbles: %d reactor(s) of a fake clientset block in a package with synctest bubbles: delay the caller outside the fake (clustertest.Outside)\n", len(found))
		os.Exit(1)
	}
	fmt.Println("bubbles: no reactor blocks in a package with synctest bubbles")
}

// check parses the Go files under roots, package by package (directory),
// and returns the blocking reactors of the packages that use synctest.
func check(roots []string) ([]string, error) {
	dirs, err := packages(roots)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, files := range dirs {
		f, err := checkPackage(files)
		if err != nil {
			return nil, err
		}
		found = append(found, f...)
	}
	sort.Strings(found)
	return found, nil
}

// packages lists the Go files under roots by directory.
func packages(roots []string) (map[string][]string, error) {
	dirs := map[string][]string{}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") {
				dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return dirs, nil
}

func checkPackage(paths []string) ([]string, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	bubbles := false
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		bubbles = bubbles || startsBubbles(f)
	}
	if !bubbles {
		return nil, nil
	}
	var found []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isReactorCall(call) {
				return true
			}
			for _, arg := range call.Args {
				if lit, ok := arg.(*ast.FuncLit); ok {
					if pos, what := blocks(lit.Body); pos.IsValid() {
						found = append(found, fmt.Sprintf("%s: a reactor %s", fset.Position(pos), what))
					}
				}
			}
			return true
		})
	}
	return found, nil
}

// startsBubbles reports whether f imports testing/synctest, or calls
// clustertest.Bubble or clustertest.InBubble (synctest.Test with a watchdog).
func startsBubbles(f *ast.File) bool {
	helper := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		switch {
		case path == "testing/synctest":
			return true
		case strings.HasSuffix(path, "/internal/cluster/clustertest"):
			helper = "clustertest"
			if imp.Name != nil {
				helper = imp.Name.Name
			}
		}
	}
	found := false
	if helper != "" {
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == helper && (sel.Sel.Name == "Bubble" || sel.Sel.Name == "InBubble") {
					found = true
				}
			}
			return !found
		})
	}
	return found
}

func isReactorCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && strings.HasSuffix(sel.Sel.Name, "Reactor")
}

// blocks returns the first place in body that can block, and what it does
// there; a function literal inside the body (a goroutine it starts) is not
// the reactor's own time.
func blocks(body *ast.BlockStmt) (token.Pos, string) {
	var pos token.Pos
	var what string
	ast.Inspect(body, func(n ast.Node) bool {
		if pos.IsValid() {
			return false
		}
		switch x := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.GoStmt:
			return false
		case *ast.UnaryExpr:
			if x.Op == token.ARROW {
				pos, what = x.Pos(), "receives from a channel"
			}
		case *ast.SelectStmt:
			if !hasDefault(x) {
				pos, what = x.Pos(), "selects without a default"
				return false
			}
			// with a default, its cases do not wait: only their bodies can
			for _, c := range x.Body.List {
				if !pos.IsValid() {
					pos, what = blocks(&ast.BlockStmt{List: c.(*ast.CommClause).Body})
				}
			}
			return false
		case *ast.CallExpr:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && sel.Sel.Name == "Sleep" {
					pos, what = x.Pos(), "sleeps"
				} else if sel.Sel.Name == "Wait" && len(x.Args) == 0 {
					pos, what = x.Pos(), "waits"
				}
			}
		}
		return true
	})
	return pos, what
}

func hasDefault(s *ast.SelectStmt) bool {
	for _, c := range s.Body.List {
		if cc, ok := c.(*ast.CommClause); ok && cc.Comm == nil {
			return true
		}
	}
	return false
}

// printBubbleTests writes "./DIR... ^(TestA|TestB)$": the packages under
// roots with tests whose body calls synctest.Test, clustertest.Bubble or
// clustertest.InBubble, and those tests.
func printBubbleTests(w io.Writer, roots []string) error {
	dirs, err := packages(roots)
	if err != nil {
		return err
	}
	var pkgs, names []string
	for dir, files := range dirs {
		had := len(names)
		for _, p := range files {
			if !strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && callsSynctest(fn.Body) {
					names = append(names, fn.Name.Name)
				}
			}
		}
		if len(names) > had {
			pkgs = append(pkgs, "./"+filepath.ToSlash(dir))
		}
	}
	if len(pkgs) == 0 {
		return nil
	}
	sort.Strings(pkgs)
	sort.Strings(names)
	_, err = fmt.Fprintf(w, "%s ^(%s)$\n", strings.Join(pkgs, " "), strings.Join(names, "|"))
	return err
}

func callsSynctest(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && (id.Name == "synctest" && sel.Sel.Name == "Test" ||
					id.Name == "clustertest" && (sel.Sel.Name == "Bubble" || sel.Sel.Name == "InBubble")) {
					found = true
				}
			}
		}
		return !found
	})
	return found
}
