package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RBAC is what Kubernetes manifest files grant.
type RBAC struct {
	// Rules are the rules of every ClusterRole and Role in the files.
	Rules []PolicyRule
	// BoundGroups are the Group subjects of every (Cluster)RoleBinding.
	BoundGroups []string
	// Bindings are the (Cluster)RoleBindings.
	Bindings []Binding
	// Namespaces are the namespaces the files create (or, for RBACFor, the
	// user creates as they say).
	Namespaces []string
}

// PolicyRule is one rule of a (Cluster)Role.
type PolicyRule struct {
	Role            string   `yaml:"-"` // Kind/name
	Namespace       string   `yaml:"-"` // a Role's
	APIGroups       []string `yaml:"apiGroups"`
	Resources       []string `yaml:"resources"`
	Verbs           []string `yaml:"verbs"`
	ResourceNames   []string `yaml:"resourceNames"`
	NonResourceURLs []string `yaml:"nonResourceURLs"`
}

// Binding is one (Cluster)RoleBinding.
type Binding struct {
	Kind      string // ClusterRoleBinding or RoleBinding
	Namespace string // a RoleBinding's
	Role      string // the role it refers to: Kind/name
	Groups    []string
}

// The manifests under terraform/kubernetes/: what every deployment applies,
// the lease namespace's Role (applied into LEASE_NAMESPACE), and the node
// deletion grant (only with DELETE_TERMINATED_NODES).
const (
	RBACMain           = "rbac.yaml"
	RBACLeaseNamespace = "rbac-lease-namespace.yaml"
	RBACDeleteNodes    = "rbac-delete-nodes.yaml"
)

// RBACSetting is the configuration the cluster's RBAC follows.
type RBACSetting struct {
	LeaseNamespace        string
	DeleteTerminatedNodes bool
}

func (s RBACSetting) String() string {
	return fmt.Sprintf("LEASE_NAMESPACE=%s DELETE_TERMINATED_NODES=%t", s.LeaseNamespace, s.DeleteTerminatedNodes)
}

// RBACFor reads what a user applies for s from dir (terraform/kubernetes),
// as the manifests' comments say and terraform's manage_rbac does:
// rbac.yaml; the namespace s.LeaseNamespace with rbac-lease-namespace.yaml
// applied into it (kubectl apply -n: a document naming another namespace is
// an error); rbac-delete-nodes.yaml when s.DeleteTerminatedNodes.
func RBACFor(dir string, s RBACSetting) (*RBAC, error) {
	out, err := loadRBAC(filepath.Join(dir, RBACMain), "")
	if err != nil {
		return nil, err
	}
	lease, err := loadRBAC(filepath.Join(dir, RBACLeaseNamespace), s.LeaseNamespace)
	if err != nil {
		return nil, err
	}
	out.add(lease)
	out.Namespaces = append(out.Namespaces, s.LeaseNamespace)
	if s.DeleteTerminatedNodes {
		del, err := loadRBAC(filepath.Join(dir, RBACDeleteNodes), "")
		if err != nil {
			return nil, err
		}
		out.add(del)
	}
	return out, nil
}

func (r *RBAC) add(o *RBAC) {
	r.Rules = append(r.Rules, o.Rules...)
	r.BoundGroups = append(r.BoundGroups, o.BoundGroups...)
	r.Bindings = append(r.Bindings, o.Bindings...)
	r.Namespaces = append(r.Namespaces, o.Namespaces...)
}

// LoadRBAC reads every YAML document of a Kubernetes RBAC manifest file.
func LoadRBAC(path string) (*RBAC, error) { return loadRBAC(path, "") }

// loadRBAC reads a manifest applied with kubectl's -n ns (empty: none):
// namespaced objects without a namespace get ns, and one with another
// namespace is an error, as kubectl refuses it.
func loadRBAC(path, ns string) (*RBAC, error) {
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
				Name      string `yaml:"name"`
				Namespace string `yaml:"namespace"`
			} `yaml:"metadata"`
			Rules   []PolicyRule `yaml:"rules"`
			RoleRef struct {
				Kind string `yaml:"kind"`
				Name string `yaml:"name"`
			} `yaml:"roleRef"`
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
		docNS := doc.Metadata.Namespace
		if doc.Kind == "Role" || doc.Kind == "RoleBinding" {
			switch {
			case docNS == "":
				docNS = ns
			case ns != "" && docNS != ns:
				return nil, fmt.Errorf("%s: %s/%s is in namespace %s, applied into %s: kubectl refuses it", path, doc.Kind, doc.Metadata.Name, docNS, ns)
			}
		}
		switch doc.Kind {
		case "ClusterRole", "Role":
			for _, r := range doc.Rules {
				r.Role = doc.Kind + "/" + doc.Metadata.Name
				if doc.Kind == "Role" {
					r.Namespace = docNS
				}
				out.Rules = append(out.Rules, r)
			}
		case "ClusterRoleBinding", "RoleBinding":
			b := Binding{Kind: doc.Kind, Role: doc.RoleRef.Kind + "/" + doc.RoleRef.Name}
			if doc.Kind == "RoleBinding" {
				b.Namespace = docNS
			}
			for _, s := range doc.Subjects {
				if s.Kind == "Group" {
					out.BoundGroups = append(out.BoundGroups, s.Name)
					b.Groups = append(b.Groups, s.Name)
				}
			}
			out.Bindings = append(out.Bindings, b)
		case "Namespace":
			out.Namespaces = append(out.Namespaces, doc.Metadata.Name)
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
