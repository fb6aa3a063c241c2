package harness

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ownStages are the harness's kwok stages: the CSI attacher's, and
// pod-delete stages in place of kwok's fast one (kwokPodDeleteStage) that
// leave the pods of a stopped kubelet Terminating and finish a pod annotated
// StopsWithinGraceAnnotation within its grace period.
//
//go:embed stages/*.yaml
var ownStages embed.FS

const kwokPodDeleteStage = "pod-fast-pod-delete.yaml"

// kwokNodeInitializeStage is kwok's stage that reports a node Ready
// whenever it is not: the harness runs it with one more selector, so that
// a node annotated RuntimeDownAnnotation stays NotReady (RuntimeDown).
const kwokNodeInitializeStage = "node-fast-node-initialize.yaml"

// RuntimeDownAnnotation marks a node whose kubelet runs but reports
// NotReady, its container runtime down (RuntimeDown): kwok's
// node-initialize stage leaves its conditions alone, and kwok goes on
// renewing its Lease.
const RuntimeDownAnnotation = "harness.node-drainer.io/runtime-down"

// KubeletStoppedAnnotation marks the pods of a node whose kubelet the harness
// stopped; the pod-delete stage does not finish their deletion.
const KubeletStoppedAnnotation = "harness.node-drainer.io/kubelet-stopped"

// StopsWithinGraceAnnotation marks a pod whose graceful deletion kwok
// finishes at a random moment within its grace period (kwok's own general
// pod-delete stage: a real pod's containers take their time to stop), not
// at once (Workload.StopWithinGrace).
const StopsWithinGraceAnnotation = "harness.node-drainer.io/stops-within-grace"

// KwokAnnotation marks the nodes whose kubelet kwok plays.
const KwokAnnotation = "kwok.x-k8s.io/node"

// startKwok runs kwok with its fast node and pod stages, a Lease heartbeat (so
// a node whose Lease is taken over goes NotReady like a dead kubelet) and our
// CSI attacher stages.
func (e *Env) startKwok(ctx context.Context, id identity) error {
	e.kwokUser = id
	return e.runKwok(ctx, "kwok", "fake", 40, true)
}

// runKwok runs one kwok process (logs and files named name) that plays the
// nodes annotated KwokAnnotation=value, renewing each node's Lease every
// leaseSeconds/4. With all, it plays their pods and the CSI attacher too;
// without, only the nodes (one process plays the attacher).
func (e *Env) runKwok(ctx context.Context, name, value string, leaseSeconds int, all bool) error {
	id := e.kwokUser
	kc := filepath.Join(e.Dir, name+".kubeconfig")
	if err := writeKubeconfig(kc, e.Server, e.pki.caPEM, id); err != nil {
		return err
	}
	var configs []string
	own, err := fs.Glob(ownStages, "stages/*.yaml")
	if err != nil {
		return err
	}
	for _, stage := range own {
		if !all {
			break
		}
		body, err := ownStages.ReadFile(stage)
		if err != nil {
			return err
		}
		path := filepath.Join(e.Dir, "stage-"+filepath.Base(stage))
		if err := os.WriteFile(path, body, 0o600); err != nil {
			return err
		}
		configs = append(configs, "--config="+path)
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	stages, err := filepath.Glob(filepath.Join(e.bins.path("stages"), "*.yaml"))
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + kc,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokAnnotation + "=" + value,
		"--server-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--node-lease-duration-seconds=" + strconv.Itoa(leaseSeconds),
	}
	args = append(args, configs...)
	replaced := false
	for _, s := range stages {
		if filepath.Base(s) == kwokPodDeleteStage {
			replaced = true
			continue
		}
		if !all && !strings.HasPrefix(filepath.Base(s), "node-") {
			continue
		}
		if filepath.Base(s) == kwokNodeInitializeStage {
			if s, err = e.leaveRuntimeDown(s, name); err != nil {
				return err
			}
		}
		args = append(args, "--config="+s)
	}
	if !replaced {
		return fmt.Errorf("kwok stages in %s: no %s to replace; rebuild the tools (hack/tools/build.sh)", e.bins.path("stages"), kwokPodDeleteStage)
	}
	p, err := e.start(name, e.bins.path("kwok"), args, []string{"HOME=" + e.Dir})
	if err != nil {
		return err
	}
	return p.waitHealthy(ctx, "http://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz", componentStartWait, nil)
}

// leaveRuntimeDown writes kwok's node-initialize stage (path) with one more
// selector: not a node annotated RuntimeDownAnnotation. It returns the
// copy's path.
func (e *Env) leaveRuntimeDown(path, name string) (string, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	const at = "    matchExpressions:\n"
	if strings.Count(string(body), at) != 1 {
		return "", fmt.Errorf("kwok stage %s: no single selector to add to; rebuild the tools (hack/tools/build.sh)", path)
	}
	notDown := at + "    - key: '.metadata.annotations[\"" + RuntimeDownAnnotation + "\"]'\n      operator: 'DoesNotExist'\n"
	out := filepath.Join(e.Dir, name+"-"+kwokNodeInitializeStage)
	return out, os.WriteFile(out, []byte(strings.Replace(string(body), at, notDown, 1)), 0o600)
}
