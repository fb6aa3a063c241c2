package deploy

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// `make dist` is the release: it is run into a temporary directory (the
// repository's dist/ is not touched) and what a user downloads is checked
// the way they would use it. It runs once: the second `make dist` this test
// ran until 2026-11-28 compared two whole releases byte for byte, which the
// "deterministic" step below checks for a link, a zip and a template alone.
func TestMakeDist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bootstrap for two architectures")
	}
	for _, tool := range []string{"make", "python3", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("make dist needs %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	version := "dev"
	if out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	zips := map[string]elf.Machine{
		"node-drainer-" + version + "-arm64.zip": elf.EM_AARCH64,
		"node-drainer-" + version + "-amd64.zip": elf.EM_X86_64,
	}
	release := []string{"SHA256SUMS", "template.yaml", "README.md", "LICENSE", RBACMain, RBACLeaseNamespace, RBACDeleteNodes}
	for name := range zips {
		release = append(release, name)
	}
	slices.Sort(release)

	dist := func(dir string) {
		t.Helper()
		start := time.Now()
		cmd := exec.Command("make", "--no-print-directory", "-C", root, "dist", "DIST="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make dist DIST=%s: %v\n%s", dir, err, out)
		}
		t.Logf("make dist: %s", time.Since(start).Round(time.Second))
	}
	first := t.TempDir()
	dist(first)

	t.Run("files", func(t *testing.T) {
		for _, name := range release {
			st, err := os.Stat(filepath.Join(first, name))
			if err != nil {
				t.Errorf("release file missing: %v", err)
				continue
			}
			t.Logf("%s: %d bytes", name, st.Size())
		}
	})

	t.Run("bootstrap", func(t *testing.T) {
		for name, machine := range zips {
			bin := bootstrapOf(t, filepath.Join(first, name))
			f, err := elf.NewFile(bytes.NewReader(bin))
			if err != nil {
				t.Errorf("%s: bootstrap is not ELF: %v", name, err)
				continue
			}
			if f.Machine != machine || f.Type != elf.ET_EXEC {
				t.Errorf("%s: bootstrap is %v %v, want %v ET_EXEC", name, f.Machine, f.Type, machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
					t.Errorf("%s: bootstrap is dynamically linked (%v): provided.al2023 needs CGO_ENABLED=0", name, p.Type)
				}
			}
			if !bytes.Contains(bin, []byte(version)) {
				t.Errorf("%s: bootstrap does not carry the version %q", name, version)
			}
		}
	})

	// the binary this machine can run says its version first
	t.Run("first log line", func(t *testing.T) {
		arch := map[string]string{"amd64": "amd64", "arm64": "arm64"}[runtime.GOARCH]
		if runtime.GOOS != "linux" || arch == "" {
			t.Skipf("cannot run a linux bootstrap on %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		bin := filepath.Join(t.TempDir(), "bootstrap")
		if err := os.WriteFile(bin, bootstrapOf(t, filepath.Join(first, "node-drainer-"+version+"-"+arch+".zip")), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin)
		cmd.Env = []string{"AWS_LAMBDA_LOG_FORMAT=JSON"} // not configured: it logs, then fails
		out, _ := cmd.Output()
		line, _, _ := strings.Cut(string(out), "\n")
		var first map[string]any
		if err := json.Unmarshal([]byte(line), &first); err != nil {
			t.Fatalf("first line is not JSON: %q: %v", line, err)
		}
		if first["message"] != "node-drainer starting" || first["version"] != version || first["arch"] != arch {
			t.Errorf("first line: want node-drainer starting, version %q, arch %s; got %s", version, arch, line)
		}
	})

	t.Run("SHA256SUMS", func(t *testing.T) {
		cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
		cmd.Dir = first
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
		}
		sums, err := os.ReadFile(filepath.Join(first, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		sc := bufio.NewScanner(bytes.NewReader(sums))
		for sc.Scan() {
			sum, name, ok := strings.Cut(sc.Text(), "  ")
			data, err := os.ReadFile(filepath.Join(first, name))
			if !ok || err != nil {
				t.Errorf("SHA256SUMS line %q: %v", sc.Text(), err)
				continue
			}
			if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != sum {
				t.Errorf("SHA256SUMS: %s does not match", name)
			}
			listed = append(listed, name)
		}
		slices.Sort(listed)
		want := slices.DeleteFunc(slices.Clone(release), func(s string) bool { return s == "SHA256SUMS" })
		if !slices.Equal(listed, want) {
			t.Errorf("SHA256SUMS lists %v, want %v", listed, want)
		}
	})

	// Two runs of `make dist` on one commit give the same files: the
	// bootstrap built again (`make build`, into another directory: a link,
	// the compile is cached), zipped again and the template packaged again
	// are byte-identical to the release's. What else the release holds is
	// copied (checked below) or SHA256SUMS of these.
	t.Run("deterministic", func(t *testing.T) {
		again := t.TempDir()
		arch := "amd64"
		name := "node-drainer-" + version + "-" + arch + ".zip"
		steps := [][]string{
			{"make", "--no-print-directory", "-C", root, "build", "ARCH=" + arch, "DIST=" + again, "VERSION=" + version},
			{"python3", filepath.Join(root, "hack/release/zip.py"), filepath.Join(again, arch, "bootstrap"), filepath.Join(again, name)},
		}
		for _, args := range steps {
			if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		tmpl, err := exec.Command("python3", filepath.Join(root, "hack/release/template.py"), filepath.Join(root, "template.yaml"),
			"node-drainer-"+version+"-arm64.zip", version).Output()
		if err != nil {
			t.Fatalf("template.py: %v", err)
		}
		if err := os.WriteFile(filepath.Join(again, "template.yaml"), tmpl, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{name, "template.yaml"} {
			a, errA := os.ReadFile(filepath.Join(first, f))
			b, errB := os.ReadFile(filepath.Join(again, f))
			if errA != nil || errB != nil {
				t.Errorf("%s: %v %v", f, errA, errB)
				continue
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s differs between two builds of one commit", f)
			}
		}
	})

	t.Run("template", func(t *testing.T) {
		path := filepath.Join(first, "template.yaml")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Description string `yaml:"Description"`
			Resources   struct {
				Function struct {
					Type       string         `yaml:"Type"`
					Metadata   map[string]any `yaml:"Metadata"`
					Properties map[string]any `yaml:"Properties"`
				} `yaml:"NodeDrainerFunction"`
			} `yaml:"Resources"`
		}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		fn := doc.Resources.Function
		if fn.Type != "AWS::Serverless::Function" {
			t.Fatalf("NodeDrainerFunction missing: %+v", fn)
		}
		if want := "node-drainer-" + version + "-arm64.zip"; fn.Properties["CodeUri"] != want {
			t.Errorf("CodeUri = %v, want %s (the arm64 zip beside the template)", fn.Properties["CodeUri"], want)
		}
		if !slices.Equal(anyStrings(fn.Properties["Architectures"]), []string{"arm64"}) {
			t.Errorf("Architectures = %v, want [arm64], the zip's", fn.Properties["Architectures"])
		}
		if fn.Metadata != nil {
			t.Errorf("the sam build Metadata is still there: %v", fn.Metadata)
		}
		if !strings.Contains(doc.Description, version) {
			t.Errorf("description does not name the version %s: %q", version, doc.Description)
		}
		// the stack it describes is the repository's
		repo, err := LoadSAM(filepath.Join(root, "template.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		packaged, err := LoadSAM(path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := Diff(repo, packaged); len(diff) > 0 {
			t.Errorf("the packaged template describes another stack:\n%s", strings.Join(diff, "\n"))
		}
		// publishable from the release's directory (sam package uploads
		// the ReadmeUrl beside it)
		problems, err := sarProblems(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("the packaged template, for the Serverless Application Repository: %s", p)
		}
		if _, err := exec.LookPath("cfn-lint"); err != nil {
			t.Skip("cfn-lint not installed: the packaged template is not linted")
		}
		if out, err := exec.Command("cfn-lint", path).CombinedOutput(); err != nil {
			t.Errorf("cfn-lint %s: %v\n%s", path, err, out)
		}
	})

	// the files copied as they are: the cluster's RBAC, and the readme and
	// licence SAR's metadata names (the packaged template's ReadmeUrl and
	// LicenseUrl, beside it)
	for name, src := range map[string]string{
		RBACMain: "terraform/kubernetes/" + RBACMain, RBACLeaseNamespace: "terraform/kubernetes/" + RBACLeaseNamespace,
		RBACDeleteNodes: "terraform/kubernetes/" + RBACDeleteNodes, "README.md": "README.md", "LICENSE": "LICENSE",
	} {
		t.Run(name, func(t *testing.T) {
			a, errA := os.ReadFile(filepath.Join(root, filepath.FromSlash(src)))
			b, err := os.ReadFile(filepath.Join(first, name))
			if errA != nil || err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s is not %s (%v, %v)", name, src, errA, err)
			}
		})
	}
}

// bootstrapOf checks that a release zip holds exactly bootstrap, at the root,
// a regular file with mode 0755 and the fixed time, and returns it.
func bootstrapOf(t *testing.T, path string) []byte {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer z.Close()
	if len(z.File) != 1 || z.File[0].Name != "bootstrap" {
		var names []string
		for _, f := range z.File {
			names = append(names, f.Name)
		}
		t.Fatalf("%s holds %v, want only bootstrap at the root", path, names)
	}
	f := z.File[0]
	if f.Mode() != 0o755 {
		t.Errorf("%s: bootstrap has mode %v, want -rwxr-xr-x", path, f.Mode())
	}
	if want := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC); !f.Modified.Equal(want) {
		t.Errorf("%s: bootstrap's time is %v, want the fixed %v", path, f.Modified, want)
	}
	r, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func anyStrings(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}
