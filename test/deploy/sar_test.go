package deploy

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The Serverless Application Repository's rules for a template
// (docs.aws.amazon.com/serverlessrepo: "AWS SAM template metadata section
// properties", "List of supported AWS resources"; SAR answers "Provided
// Transform ... is unsupported" to any transform but SAM's). Not published
// from here (no SAR in the emulator): the template is held to the rules.

// sarTypes are the resource types of the template SAR lists as supported
// (checked against the list's last published source), with the two it does
// not list named as such: SAR refuses an application with a type it does not
// support, so these are the ones to look at first if it does.
var sarTypes = map[string]string{
	"AWS::Serverless::Function":      "listed",
	"AWS::Lambda::Function":          "listed",
	"AWS::Lambda::Permission":        "listed",
	"AWS::Lambda::EventInvokeConfig": "listed",
	"AWS::IAM::Role":                 "listed",
	"AWS::IAM::Policy":               "listed",
	"AWS::Events::Rule":              "listed",
	"AWS::SQS::Queue":                "listed",
	"AWS::SQS::QueuePolicy":          "listed",
	"AWS::Logs::LogGroup":            "listed",
	"AWS::CloudWatch::Alarm":         "listed",
	"AWS::CloudWatch::Dashboard":     "listed",
	// a custom resource is a Lambda invocation by CloudFormation itself
	"Custom::LifecycleHooks":        "custom resource",
	"Custom::LifecycleHooksRelease": "custom resource",
	// not on the list as last published (the type is newer than it); only
	// with CreateAccessEntry=true, which a SAR user can turn off
	"AWS::EKS::AccessEntry": "not confirmed",
}

var (
	sarName   = regexp.MustCompile(`^[a-zA-Z0-9\-]{1,140}$`)
	sarAuthor = regexp.MustCompile(`^[a-z0-9](([a-z0-9]|-(?:[a-z0-9]))*)?$`)
	sarLabel  = regexp.MustCompile(`^[a-zA-Z0-9+\-_:/@]{1,127}$`)
	// an SPDX licence identifier (spdx.org/licenses: letters, digits, '.',
	// '-' and '+'); SAR refuses a public application without one
	sarSpdx = regexp.MustCompile(`^[A-Za-z0-9.\-+]{1,100}$`)
)

// licenceFirstLines is how each licence the template may name begins, after
// blank lines and indentation: LicenseUrl's file has to be the licence
// SpdxLicenseId names.
var licenceFirstLines = map[string][]string{
	"Apache-2.0": {"Apache License", "Version 2.0, January 2004"},
}

// sarProblems lists what SAR would refuse in the template at path.
func sarProblems(path string) ([]string, error) {
	top, err := templateDoc(path)
	if err != nil {
		return nil, err
	}
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if tr := top["Transform"]; tr != "AWS::Serverless-2016-10-31" {
		bad("Transform %v: SAR takes AWS::Serverless-2016-10-31 alone", tr)
	}
	app := asMap(asMap(top["Metadata"])["AWS::ServerlessRepo::Application"])
	if app == nil {
		bad("no Metadata AWS::ServerlessRepo::Application")
	}
	for k, v := range app {
		if _, isString := v.(string); !isString && k != "Labels" {
			bad("metadata %s: %v is not a literal string (SAR takes no intrinsic function there)", k, v)
		}
	}
	str := func(k string) string { s, _ := app[k].(string); return s }
	if !sarName.MatchString(str("Name")) {
		bad("metadata Name %q: 1-140 of [a-zA-Z0-9-]", str("Name"))
	}
	if d := strings.TrimSpace(str("Description")); d == "" || len(d) > 256 {
		bad("metadata Description: %d characters, want 1-256", len(d))
	}
	if a := str("Author"); len(a) > 127 || !sarAuthor.MatchString(a) {
		bad("metadata Author %q: lower-case letters, digits and single hyphens, 1-127", a)
	}
	labels := asList(app["Labels"])
	if len(labels) > 10 {
		bad("metadata Labels: %d, at most 10", len(labels))
	}
	for _, l := range labels {
		if s, _ := l.(string); !sarLabel.MatchString(s) {
			bad("metadata label %v: 1-127 of [a-zA-Z0-9+-_:/@]", l)
		}
	}
	// a public application needs both (SAR: "SpdxLicenseId ... LicenseUrl
	// ... required for public applications"); LicenseUrl is uploaded by
	// sam package like ReadmeUrl
	spdx, licence := str("SpdxLicenseId"), str("LicenseUrl")
	if !sarSpdx.MatchString(spdx) {
		bad("metadata SpdxLicenseId %q: a public application needs an SPDX licence identifier", spdx)
	}
	if licence == "" {
		bad("metadata LicenseUrl: missing, a public application needs the licence's file")
	} else if want, known := licenceFirstLines[spdx]; !known {
		bad("metadata SpdxLicenseId %q: not a licence this check knows the text of (%v)", spdx, slices.Sorted(maps.Keys(licenceFirstLines)))
	} else if data, err := os.ReadFile(filepath.Join(filepath.Dir(path), licence)); err == nil {
		var got []string
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && len(got) < len(want) {
				got = append(got, l)
			}
		}
		if !slices.Equal(got, want) {
			bad("metadata LicenseUrl %q: begins %q, not the %s licence (%q)", licence, got, spdx, want)
		}
	}
	for _, k := range []string{"ReadmeUrl", "LicenseUrl"} {
		if f := str(k); f != "" && !strings.Contains(f, "://") {
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), f)); err != nil {
				bad("metadata %s %q: sam package uploads a file that is not there: %v", k, f, err)
			}
		}
	}
	var types []string
	for id, r := range asMap(top["Resources"]) {
		typ, _ := asMap(r)["Type"].(string)
		if _, ok := sarTypes[typ]; !ok {
			types = append(types, id+" ("+typ+")")
		}
	}
	sort.Strings(types)
	for _, t := range types {
		bad("resource %s: not a type SAR supports", t)
	}
	return out, nil
}

func TestServerlessRepoAcceptsTemplate(t *testing.T) {
	problems, err := sarProblems(filepath.Join(repoRoot, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The check refuses what SAR refuses.
func TestServerlessRepoCheckDetects(t *testing.T) {
	for _, m := range []struct{ name, old, new, want string }{
		{"language extensions", "Transform: AWS::Serverless-2016-10-31\n", "Transform:\n  - AWS::LanguageExtensions\n  - AWS::Serverless-2016-10-31\n", "Transform"},
		{"a role policy", "  ListedGroupsPolicy:\n    Type: AWS::IAM::Policy\n", "  ListedGroupsPolicy:\n    Type: AWS::IAM::RolePolicy\n", "ListedGroupsPolicy (AWS::IAM::RolePolicy)"},
		{"a lifecycle hook resource", "    Type: Custom::LifecycleHooks\n", "    Type: AWS::AutoScaling::LifecycleHook\n", "AWS::AutoScaling::LifecycleHook"},
		{"an upper-case author", "    Author: node-drainer\n", "    Author: Node-Drainer\n", "Author"},
		{"a label with a space", "    Labels: [kubernetes,", "    Labels: [kubernetes nodes,", "label"},
		{"a missing readme", "    ReadmeUrl: README.md\n", "    ReadmeUrl: READ.md\n", "ReadmeUrl"},
		{"no licence identifier", "    SpdxLicenseId: Apache-2.0\n", "", "SpdxLicenseId"},
		{"no licence file named", "    LicenseUrl: LICENSE\n", "", "LicenseUrl: missing"},
		{"a missing licence file", "    LicenseUrl: LICENSE\n", "    LicenseUrl: LICENCE\n", "LicenseUrl \"LICENCE\": sam package"},
		{"another licence's identifier", "    SpdxLicenseId: Apache-2.0\n", "    SpdxLicenseId: MIT\n", "SpdxLicenseId \"MIT\""},
		{"another licence's text", appendTag, "MIT License\n", "not the Apache-2.0 licence"},
	} {
		t.Run(m.name, func(t *testing.T) {
			root := copyTree(t)
			if err := os.WriteFile(filepath.Join(root, "README.md"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			licence, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
			if err != nil {
				t.Fatal(err)
			}
			if m.old == appendTag { // the licence file's text is m.new
				licence = []byte(m.new)
			} else {
				mutate(t, root, "template.yaml", m.old, m.new)
			}
			if err := os.WriteFile(filepath.Join(root, "LICENSE"), licence, 0o644); err != nil {
				t.Fatal(err)
			}
			problems, err := sarProblems(filepath.Join(root, "template.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, m.want) }) {
				t.Errorf("not caught: want a problem naming %q, got %v", m.want, problems)
			}
		})
	}
}
