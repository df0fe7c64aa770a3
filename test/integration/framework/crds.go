package framework

import (
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gantry-dev/gantry/crds/install"
	"github.com/gantry-dev/gantry/internal/repo"
	"github.com/gantry-dev/gantry/test/util"
)

// StartWithCRDs is Start, then every CRD of crds/manifests installed and
// served: the control plane for tests of Gantry's APIs, whose clientset is
// cp.Gantry.
func StartWithCRDs(t testing.TB, apiserverArgs ...string) *ControlPlane {
	t.Helper()
	cp := Start(t, apiserverArgs...)
	names, err := InstallGantryCRDs(cp.Config)
	if err != nil {
		t.Fatalf("installing Gantry's CRDs: %v", err)
	}
	t.Logf("installed CRDs %s", strings.Join(names, ", "))
	return cp
}

// InstallCRDs creates CRDs (one that exists already is updated) and waits
// until each is Established and its resources are in discovery.
func (cp *ControlPlane) InstallCRDs(t testing.TB, list ...*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	if err := installCRDs(cp.Config, list); err != nil {
		t.Fatalf("installing CRDs: %v", err)
	}
}

// InstallCRDsAt creates CRDs through cfg, as InstallCRDs, for tests that
// hold only a rest config.
func InstallCRDsAt(cfg *rest.Config, list ...*apiextensionsv1.CustomResourceDefinition) error {
	return installCRDs(cfg, list)
}

// InstallGantryCRDs installs every CRD of <repo>/crds/manifests through cfg
// and waits until they are served, for tests that bring their own control
// plane (scheduler_perf's); it returns their names.
func InstallGantryCRDs(cfg *rest.Config) ([]string, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	list, err := install.Load(filepath.Join(root, "crds", "manifests"))
	if err != nil {
		return nil, err
	}
	if err := installCRDs(cfg, list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list))
	for _, c := range list {
		names = append(names, c.Name)
	}
	return names, nil
}

func installCRDs(cfg *rest.Config, list []*apiextensionsv1.CustomResourceDefinition) error {
	// envtest creates or updates each CRD, then polls discovery until
	// every version's resources are served: Established alone can precede
	// the first successful request by a moment.
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		CRDs:         list,
		PollInterval: util.Interval,
		MaxTime:      util.LongTimeout,
	})
	return err
}
