// Command size measures the product code (internal/ and functions/, without
// the tests) and holds it to the limits the code keeps: no type with more
// than 25 methods, no file over 500 lines, no function over 60 lines.
//
//	GOWORK=off go run ./hack/size            # from the repository root (make lint)
//	GOWORK=off go run ./hack/size -shrink    # rewrite allow.txt to today's sizes
//
// It prints the largest type's method count, the longest file, the longest
// function and the count of functions over the limit, then every breach. The
// code that was over a limit when the limits came is named in allow.txt with
// its size then; an allowance is a ratchet that may only shrink. The check
// fails (exit 1) when
//   - something is over a limit and has no allowance;
//   - something with an allowance grew past it;
//   - something with an allowance shrank (lower the number to the new size, so
//     it cannot grow back), is now within the limit, or is gone (remove the
//     line): -shrink does both, and never raises or adds an allowance.
//
// A function's length is its lines from `func` to its closing brace; a
// type's methods are those declared on it or on its pointer, in any file of
// its package. Names: internal/config.FromEnv (a function),
// internal/handler.run.terminate (a method), internal/handler.run (a type),
// internal/handler/graceful.go (a file).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The limits, and the trees they hold for.
const (
	maxMethods   = 25
	maxFileLines = 500
	maxFuncLines = 60
)

var roots = []string{"internal", "functions"}

// kinds of measured thing, as allow.txt names them
const (
	kindType = "type"
	kindFile = "file"
	kindFunc = "func"
)

var limits = map[string]int{kindType: maxMethods, kindFile: maxFileLines, kindFunc: maxFuncLines}

// units of each kind, for the messages
var units = map[string]string{kindType: "methods", kindFile: "lines", kindFunc: "lines"}

// key names one measured thing: its kind and name.
type key struct{ kind, name string }

func (k key) String() string { return k.kind + " " + k.name }

func main() {
	root := flag.String("root", ".", "the repository root")
	allowPath := flag.String("allow", "hack/size/allow.txt", "the allowance file (relative to -root)")
	shrink := flag.Bool("shrink", false, "rewrite the allowance file: lower shrunk entries, drop those within the limit or gone (never raises or adds one)")
	flag.Parse()

	sizes, err := measure(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "size:", err)
		os.Exit(2)
	}
	path := filepath.Join(*root, *allowPath)
	allow, err := readAllow(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "size:", err)
		os.Exit(2)
	}
	summary(sizes)
	if *shrink {
		allow = shrunk(sizes, allow)
		if err := writeAllow(path, allow); err != nil {
			fmt.Fprintln(os.Stderr, "size:", err)
			os.Exit(2)
		}
		fmt.Printf("size: wrote %s (%d entries)\n", *allowPath, len(allow))
	}
	problems := check(sizes, allow)
	for _, p := range problems {
		fmt.Println("size: FAIL", p)
	}
	if len(problems) > 0 {
		fmt.Printf("size: %d problems; allowances: %s (a ratchet: lower or remove entries, never raise or add)\n", len(problems), *allowPath)
		os.Exit(1)
	}
	fmt.Printf("size: ok (%d allowances in %s)\n", len(allow), *allowPath)
}

// measure parses every product file under roots and returns the size of each
// file (lines), function (lines) and type (methods).
func measure(root string) (map[key]int, error) {
	sizes := map[key]int{}
	fset := token.NewFileSet()
	for _, r := range roots {
		err := filepath.WalkDir(filepath.Join(root, r), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			return measureFile(fset, path, filepath.ToSlash(rel), sizes)
		})
		if err != nil {
			return nil, err
		}
	}
	return sizes, nil
}

func measureFile(fset *token.FileSet, path, rel string, sizes map[key]int) error {
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	sizes[key{kindFile, rel}] = fset.File(f.Pos()).LineCount()
	pkg := filepath.ToSlash(filepath.Dir(rel))
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		name := pkg + "." + fn.Name.Name
		if recv := receiver(fn); recv != "" {
			name = pkg + "." + recv + "." + fn.Name.Name
			sizes[key{kindType, pkg + "." + recv}]++
		} else if fn.Name.Name == "init" {
			name += "@" + filepath.Base(rel) // a package may have several
		}
		sizes[key{kindFunc, name}] = fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
	}
	return nil
}

// receiver is the name of fn's receiver type ("" for a function).
func receiver(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	t := fn.Recv.List[0].Type
	for {
		switch e := t.(type) {
		case *ast.StarExpr:
			t = e.X
		case *ast.ParenExpr:
			t = e.X
		case *ast.IndexExpr:
			t = e.X
		case *ast.IndexListExpr:
			t = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

// largest returns the key of kind with the largest size, and how many of
// that kind are over the limit.
func largest(sizes map[key]int, kind string) (top key, over int) {
	for k, n := range sizes {
		if k.kind != kind {
			continue
		}
		if n > limits[kind] {
			over++
		}
		if top.kind == "" || n > sizes[top] || n == sizes[top] && k.name < top.name {
			top = k
		}
	}
	return top, over
}

func summary(sizes map[key]int) {
	for _, s := range []struct{ kind, what string }{
		{kindType, "largest type"}, {kindFile, "longest file"}, {kindFunc, "longest function"},
	} {
		top, over := largest(sizes, s.kind)
		fmt.Printf("size: %-16s %s: %d %s (limit %d; %d over it)\n",
			s.what, top.name, sizes[top], units[s.kind], limits[s.kind], over)
	}
	_, over := largest(sizes, kindFunc)
	fmt.Printf("size: functions over %d lines: %d\n", maxFuncLines, over)
}

// check returns every breach of the limits and the allowances, in order.
func check(sizes, allow map[key]int) []string {
	var problems []string
	for _, k := range sorted(sizes) {
		n, limit := sizes[k], limits[k.kind]
		a, allowed := allow[k]
		switch {
		case n > limit && !allowed:
			problems = append(problems, fmt.Sprintf("%s: %d %s, over the limit of %d (make it smaller; an allowance is not added)", k, n, units[k.kind], limit))
		case allowed && n > a:
			problems = append(problems, fmt.Sprintf("%s: %d %s, grew past its allowance of %d", k, n, units[k.kind], a))
		case allowed && n <= limit:
			problems = append(problems, fmt.Sprintf("%s: %d %s, now within the limit of %d: remove its allowance", k, n, units[k.kind], limit))
		case allowed && n < a:
			problems = append(problems, fmt.Sprintf("%s: %d %s, shrank from its allowance of %d: lower the allowance to %d", k, n, units[k.kind], a, n))
		}
	}
	for _, k := range sorted(allow) {
		if _, ok := sizes[k]; !ok {
			problems = append(problems, fmt.Sprintf("%s: gone: remove its allowance", k))
		}
	}
	return problems
}

// shrunk is allow with each entry lowered to today's size, and the entries
// within the limit or gone dropped; an entry is never raised.
func shrunk(sizes, allow map[key]int) map[key]int {
	out := map[key]int{}
	for k, a := range allow {
		n, ok := sizes[k]
		if !ok || n <= limits[k.kind] {
			continue
		}
		out[k] = min(a, n)
	}
	return out
}

func sorted(m map[key]int) []key {
	keys := make([]key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].kind != keys[j].kind {
			return keys[i].kind < keys[j].kind
		}
		return keys[i].name < keys[j].name
	})
	return keys
}

const allowHeader = `# The product code over the limits of hack/size (no type over 25 methods, no
# file over 500 lines, no function over 60 lines) and its size when the limits
# came: "<type|file|func> <name> <size>". A ratchet: an entry may only be
# lowered or removed (go run ./hack/size -shrink does it), never raised or added.
`

func readAllow(path string) (map[key]int, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[key]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	allow := map[key]int{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 3 || limits[fields[0]] == 0 {
			return nil, fmt.Errorf("%s:%d: want \"<type|file|func> <name> <size>\", have %q", path, line, text)
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		k := key{fields[0], fields[1]}
		if _, dup := allow[k]; dup {
			return nil, fmt.Errorf("%s:%d: %s named twice", path, line, k)
		}
		allow[k] = n
	}
	return allow, sc.Err()
}

func writeAllow(path string, allow map[key]int) error {
	var b strings.Builder
	b.WriteString(allowHeader)
	for _, k := range sorted(allow) {
		fmt.Fprintf(&b, "%s %d\n", k, allow[k])
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
