package kind

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// A manifest as kubeadm writes it for kind's control-plane node.
const schedulerManifest = `apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --config=/etc/kubernetes/gantry/kube-scheduler.yaml
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    image: gantry.local/kube-scheduler:v1.36.3
    name: kube-scheduler
`

func TestUpgradeManifest(t *testing.T) {
	out, err := upgradeManifest([]byte(schedulerManifest), "kube-scheduler", "gantry.local/kube-scheduler:v1.37.2", "/etc/kubernetes/gantry/kube-scheduler-v1.37.2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("kube-scheduler:v1.36.3", "kube-scheduler:v1.37.2",
		"gantry/kube-scheduler.yaml", "gantry/kube-scheduler-v1.37.2.yaml").Replace(schedulerManifest)
	if string(out) != want {
		t.Errorf("upgraded manifest:\n%s\nwant:\n%s", out, want)
	}

	// The stock control plane's upstream build keeps its name.
	stock := strings.Replace(schedulerManifest, "kube-scheduler:v1.36.3", "kube-scheduler-upstream:v1.36.3", 1)
	if _, ref, ok := manifestImage([]byte(stock), "kube-scheduler"); !ok || ref != "gantry.local/kube-scheduler-upstream:v1.36.3" {
		t.Errorf("stock image = %q, %v", ref, ok)
	}
	out, err = upgradeManifest([]byte(stock), "kube-scheduler", "gantry.local/kube-scheduler-upstream:v1.37.2", "")
	if err != nil || !strings.Contains(string(out), "image: gantry.local/kube-scheduler-upstream:v1.37.2\n") ||
		!strings.Contains(string(out), "--config=/etc/kubernetes/gantry/kube-scheduler.yaml") {
		t.Errorf("stock manifest upgraded to:\n%s (%v)", out, err)
	}

	// Images of other components, or of another registry, are not the
	// component's: the manifest is refused rather than half changed.
	for _, m := range []string{
		strings.Replace(schedulerManifest, "gantry.local/kube-scheduler:", "registry.k8s.io/kube-scheduler:", 1),
		strings.Replace(schedulerManifest, "gantry.local/kube-scheduler:", "gantry.local/kube-scheduler-extra:", 1),
	} {
		if _, err := upgradeManifest([]byte(m), "kube-scheduler", "gantry.local/kube-scheduler:v1.37.2", ""); err == nil {
			t.Errorf("manifest with no Gantry image of kube-scheduler accepted:\n%s", m)
		}
	}
	noConfig := strings.Replace(schedulerManifest, "    - --config=/etc/kubernetes/gantry/kube-scheduler.yaml\n", "", 1)
	if _, err := upgradeManifest([]byte(noConfig), "kube-scheduler", "gantry.local/kube-scheduler:v1.37.2", "/x.yaml"); err == nil {
		t.Error("a configuration was put in a manifest that names none")
	}
}

// The steps follow docs/upgrade.md: CRDs, the static pods with etcd first
// and kube-scheduler after kube-apiserver, then gantry-scheduler,
// gantry-webhook and gantry-provisioner.
func TestUpgradeSteps(t *testing.T) {
	for plane, want := range map[string][]string{
		cluster.ControlPlaneGantry: {"crds", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "coredns",
			"gantry-provisioner", "kwok-controller"},
		cluster.ControlPlaneStock: {"crds", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "coredns",
			"gantry-scheduler", "gantry-webhook", "gantry-provisioner", "kwok-controller"},
	} {
		r := &Runtime{plane: plane}
		if got := r.UpgradeSteps(); !slices.Equal(got, want) {
			t.Errorf("%s: steps %v, want %v", plane, got, want)
		}
	}
}

func TestReleaseImage(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "_output", "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	digests := "gantry.local/etcd:3.7.0-0 sha256:aa 1000\ngantry.local/kube-apiserver-upstream:v1.37.2 sha256:bb 2000\n\n"
	if err := os.WriteFile(filepath.Join(root, "_output", "images", "digests.txt"), []byte(digests), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{o: &cluster.Options{Root: root}}
	for old, want := range map[string]string{
		"gantry.local/etcd:3.6.5-0":                    "gantry.local/etcd:3.7.0-0",
		"gantry.local/kube-apiserver-upstream:v1.36.3": "gantry.local/kube-apiserver-upstream:v1.37.2",
	} {
		if got, err := r.releaseImage(old); err != nil || got != want {
			t.Errorf("releaseImage(%s) = %q, %v; want %q", old, got, err, want)
		}
	}
	if _, err := r.releaseImage("gantry.local/kube-apiserver:v1.36.3"); err == nil {
		t.Error("an image this release does not build was named")
	}
}
