package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// RBAC is what the Kubernetes manifest file grants.
type RBAC struct {
	// Rules are the rules of every ClusterRole and Role in the file.
	Rules []PolicyRule
	// BoundGroups are the Group subjects of every (Cluster)RoleBinding.
	BoundGroups []string
}

// PolicyRule is one rule of a (Cluster)Role.
type PolicyRule struct {
	Role            string   `yaml:"-"`
	APIGroups       []string `yaml:"apiGroups"`
	Resources       []string `yaml:"resources"`
	Verbs           []string `yaml:"verbs"`
	ResourceNames   []string `yaml:"resourceNames"`
	NonResourceURLs []string `yaml:"nonResourceURLs"`
}

// LoadRBAC reads every YAML document of a Kubernetes RBAC manifest file.
func LoadRBAC(path string) (*RBAC, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading RBAC manifest: %w", err)
	}
	var out RBAC
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Rules    []PolicyRule `yaml:"rules"`
			Subjects []struct {
				Kind string `yaml:"kind"`
				Name string `yaml:"name"`
			} `yaml:"subjects"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parsing RBAC manifest %s: %w", path, err)
		}
		switch doc.Kind {
		case "ClusterRole", "Role":
			for _, r := range doc.Rules {
				r.Role = doc.Kind + "/" + doc.Metadata.Name
				out.Rules = append(out.Rules, r)
			}
		case "ClusterRoleBinding", "RoleBinding":
			for _, s := range doc.Subjects {
				if s.Kind == "Group" {
					out.BoundGroups = append(out.BoundGroups, s.Name)
				}
			}
		}
	}
	return &out, nil
}

// WildcardProblems reports every "*" in a rule's API groups, resources,
// verbs, resource names or non-resource URLs.
func (r *RBAC) WildcardProblems() []string {
	var out []string
	for _, rule := range r.Rules {
		for field, values := range map[string][]string{
			"apiGroups": rule.APIGroups, "resources": rule.Resources, "verbs": rule.Verbs,
			"resourceNames": rule.ResourceNames, "nonResourceURLs": rule.NonResourceURLs,
		} {
			for _, v := range values {
				if strings.Contains(v, "*") {
					out = append(out, fmt.Sprintf("%s: rule %v: %s contains %q", rule.Role, rule.Resources, field, v))
				}
			}
		}
	}
	if len(r.Rules) == 0 {
		out = append(out, "no ClusterRole rules found")
	}
	return out
}
