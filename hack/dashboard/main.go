// Command dashboard writes the SAM template's dashboard body from the one
// definition of the dashboard, terraform/dashboard.json.tftpl, which the
// terraform module reads itself (templatefile in terraform/dashboard.tf).
//
//	GOWORK=off go run ./hack/dashboard           # rewrite template.yaml's DashboardBody (make dashboard)
//	GOWORK=off go run ./hack/dashboard -check    # fail when it is stale (make deploy-check)
//
// The SAM template stays one file (the Serverless Application Repository and
// `make dist` ship it alone), so the body is written into it: the lines of the
// block scalar under `DashboardBody: !Sub |`, and nothing else of the file.
// The definition's placeholders become the template's !Sub variables:
// ${function_name} is ${FunctionName}, ${region} is ${AWS::Region}, and the
// literal $${ (CloudWatch's ${PROP(...)} labels) is !Sub's literal ${!. Any
// other placeholder or template directive is refused: both descriptions must
// be able to say it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
)

const (
	definitionFile = "terraform/dashboard.json.tftpl"
	samFile        = "template.yaml"
	bodyKey        = "DashboardBody: !Sub |"
)

// samVars are the definition's variables and the !Sub variable each stands for.
var samVars = map[string]string{
	"function_name": "${FunctionName}",
	"region":        "${AWS::Region}",
}

// placeholder matches what terraform's template language gives meaning to:
// an escaped $${ or %%{, an interpolation ${...}, a directive %{...}.
var placeholder = regexp.MustCompile(`\$\$\{|%%\{|\$\{[^}]*\}?|%\{`)

func main() {
	check := flag.Bool("check", false, "fail when "+samFile+"'s dashboard body is not what "+definitionFile+" gives")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	def, err := os.ReadFile(definitionFile)
	if err != nil {
		return err
	}
	tmpl, err := os.ReadFile(samFile)
	if err != nil {
		return err
	}
	want, err := generate(string(tmpl), string(def))
	if err != nil {
		return err
	}
	if want == string(tmpl) {
		fmt.Printf("%s: the dashboard body is %s's\n", samFile, definitionFile)
		return nil
	}
	if check {
		return errors.New(staleMessage(string(tmpl), want))
	}
	if err := os.WriteFile(samFile, []byte(want), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: dashboard body written from %s\n", samFile, definitionFile)
	return nil
}

// generate returns the SAM template tmpl with its dashboard body written from
// the definition def.
func generate(tmpl, def string) (string, error) {
	body, err := samBody(def)
	if err != nil {
		return "", err
	}
	return splice(tmpl, body)
}

// samBody translates the definition into the body !Sub reads.
func samBody(def string) (string, error) {
	var bad []string
	out := placeholder.ReplaceAllStringFunc(def, func(p string) string {
		switch {
		case p == "$${":
			return "${!"
		case strings.HasPrefix(p, "${") && strings.HasSuffix(p, "}"):
			if v, ok := samVars[p[2:len(p)-1]]; ok {
				return v
			}
		}
		bad = append(bad, p)
		return p
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("%s: %q: only ${function_name}, ${region} and the literal $${ are known to both descriptions", definitionFile, bad)
	}
	return out, nil
}

// splice puts body in place of the block scalar under the one line
// `DashboardBody: !Sub |` of tmpl, indented two spaces deeper than the key.
func splice(tmpl, body string) (string, error) {
	lines := strings.SplitAfter(tmpl, "\n")
	at := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == bodyKey {
			if at >= 0 {
				return "", fmt.Errorf("%s: more than one %q", samFile, bodyKey)
			}
			at = i
		}
	}
	if at < 0 {
		return "", fmt.Errorf("%s: no line %q", samFile, bodyKey)
	}
	indent := indentOf(lines[at])
	end := at + 1 // the block runs while lines are blank or deeper than the key
	for end < len(lines) && (strings.TrimSpace(lines[end]) == "" || indentOf(lines[end]) > indent) {
		end++
	}
	for end > at+1 && strings.TrimSpace(lines[end-1]) == "" { // blank lines after it are not its
		end--
	}
	pad := strings.Repeat(" ", indent+2)
	var b strings.Builder
	for _, l := range strings.SplitAfter(strings.TrimRight(body, "\n")+"\n", "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString(pad)
		}
		b.WriteString(l)
	}
	return strings.Join(lines[:at+1], "") + b.String() + strings.Join(lines[end:], ""), nil
}

func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

// staleMessage names the first line where the template differs from what the
// definition gives.
func staleMessage(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	n := 0
	for n < len(h) && n < len(w) && h[n] == w[n] {
		n++
	}
	line := func(s []string) string {
		if n < len(s) {
			return strings.TrimSpace(s[n])
		}
		return "(end of file)"
	}
	return fmt.Sprintf("%s's dashboard body is stale: it is not what %s gives (run `make dashboard`); first difference at line %d:\n  %s has:  %s\n  it should be: %s",
		samFile, definitionFile, n+1, samFile, line(h), line(w))
}
