//go:build upgrade

package upgrade

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// fromFlag is the checkout of the earlier release, built (`make build
// node-image` there): its gantry-cluster makes the cluster.
var fromFlag = flag.String("upgrade-from", "", "checkout of the release upgraded from, built with `make build node-image` (hack/upgrade-test.sh makes one)")

func TestUpgrade(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry upgrade in place")
}

var _ = framework.SetupSuite(framework.WithCluster("upgrade"), framework.WithNodes(3),
	framework.WithBringUp(bringUp))

// bringUp makes the cluster with the earlier release's gantry-cluster, in
// the state directory and kubeconfig this checkout's then works on.
func bringUp(ctx context.Context, _ string, o cluster.Options) error {
	if o.Runtime != "kind" {
		return fmt.Errorf("the upgrade suite runs on kind (--runtime=kind), not %s: only a kind cluster's components run from images", o.Runtime)
	}
	if *fromFlag == "" {
		return fmt.Errorf("--upgrade-from names no checkout of the release to upgrade from")
	}
	from, err := filepath.Abs(*fromFlag)
	if err != nil {
		return err
	}
	bin := filepath.Join(from, "_output", "bin", "gantry-cluster")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("the earlier release is not built (`make build node-image` in %s): %w", from, err)
	}
	ginkgo.By("bringing the cluster up with the earlier release's gantry-cluster (" + from + ")")
	cmd := exec.CommandContext(ctx, bin, "up", "--root", from, "--runtime", o.Runtime, "--name", o.Name,
		"--workdir", o.WorkDir, "--kubeconfig", o.KubeconfigPath, "--control-plane", o.ControlPlane,
		"--nodes", strconv.Itoa(o.Nodes), "--workers", strconv.Itoa(o.Workers), "--timeout", o.Timeout.String())
	cmd.Dir = from
	cmd.Env = parentEnv(filepath.Join(o.WorkDir, "kind", "bin"))
	cmd.Stdout, cmd.Stderr = ginkgo.GinkgoWriter, ginkgo.GinkgoWriter
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s up: %w", bin, err)
	}
	return nil
}

// parentEnv is this process's environment as it was before the kind
// runtime put its docker shim (in shimDir) first on PATH: an earlier
// release's gantry-cluster would take the shim for the real docker and
// call itself.
func parentEnv(shimDir string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "GANTRY_REAL_DOCKER":
			continue
		case "PATH":
			var keep []string
			for _, p := range filepath.SplitList(v) {
				if p != shimDir {
					keep = append(keep, p)
				}
			}
			kv = "PATH=" + strings.Join(keep, string(os.PathListSeparator))
		}
		out = append(out, kv)
	}
	return out
}
