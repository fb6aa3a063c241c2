package harness

import (
	"context"
	_ "embed"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

//go:embed stages/csi-attacher.yaml
var csiAttacherStages []byte

// KwokAnnotation marks the nodes whose kubelet kwok plays.
const KwokAnnotation = "kwok.x-k8s.io/node"

// startKwok runs kwok with its fast node and pod stages, a Lease heartbeat (so
// a node whose Lease is taken over goes NotReady like a dead kubelet) and our
// CSI attacher stages.
func (e *Env) startKwok(ctx context.Context, id identity) error {
	kc := filepath.Join(e.Dir, "kwok.kubeconfig")
	if err := writeKubeconfig(kc, e.Server, e.pki.caPEM, id); err != nil {
		return err
	}
	csi := filepath.Join(e.Dir, "csi-attacher-stages.yaml")
	if err := os.WriteFile(csi, csiAttacherStages, 0o600); err != nil {
		return err
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
		"--manage-nodes-with-annotation-selector=" + KwokAnnotation + "=fake",
		"--server-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--node-lease-duration-seconds=40",
		"--config=" + csi,
	}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	p, err := e.start("kwok", e.bins.path("kwok"), args, []string{"HOME=" + e.Dir})
	if err != nil {
		return err
	}
	return p.waitHealthy(ctx, "http://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz", 30*time.Second, nil)
}
