package kind

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

func TestRequiredVersion(t *testing.T) {
	dir := t.TempDir()
	gomod := filepath.Join(dir, "go.mod")
	content := "module x\n\ngo 1.26\n\nrequire k8s.io/kwok-ish v9.9.9\n\nrequire (\n\tk8s.io/kubernetes v1.36.3\n\tsigs.k8s.io/kwok v0.8.0 // indirect\n)\n"
	if err := os.WriteFile(gomod, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	for module, want := range map[string]string{"k8s.io/kubernetes": "v1.36.3", "sigs.k8s.io/kwok": "v0.8.0", "k8s.io/kwok-ish": "v9.9.9"} {
		got, err := requiredVersion(gomod, module)
		if err != nil || got != want {
			t.Errorf("requiredVersion(%s) = %q, %v; want %q", module, got, err, want)
		}
	}
	if _, err := requiredVersion(gomod, "k8s.io/kube"); err == nil {
		t.Error("a module that is only a prefix of a required one was found")
	}
}

// The repository's own go.mod names the release the node image is tagged with.
func TestNewDefaultsTheNodeImageToThePinnedRelease(t *testing.T) {
	root := checkout(t)
	r, err := newRuntime(&cluster.Options{Root: root, Name: "x", WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.nodeImage, "gantry.local/kind-node:v1.") || r.nodeImage != "gantry.local/kind-node:"+r.kubeVersion {
		t.Errorf("node image %q for release %q", r.nodeImage, r.kubeVersion)
	}
	r, err = newRuntime(&cluster.Options{Root: root, Name: "x", NodeImage: "example.com/node:v1", WorkDir: t.TempDir()})
	if err != nil || r.nodeImage != "example.com/node:v1" {
		t.Errorf("--node-image not used: %q, %v", r.nodeImage, err)
	}
}

// The workloads are kind/config/addons with the preloaded images and the
// cluster's configuration.
func TestRenderWorkloads(t *testing.T) {
	root := checkout(t)
	work := t.TempDir()
	schedulerConfig := filepath.Join(work, "scheduler.yaml")
	if err := os.WriteFile(schedulerConfig, []byte("kind: KubeSchedulerConfiguration # marker\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := newRuntime(&cluster.Options{Root: root, Name: "w", WorkDir: work, SchedulerConfig: schedulerConfig,
		ProvisionerArgs: []string{"simulation-budget=500", "--max-bookings-per-namespace=4"}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := r.RenderWorkloads()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	configMaps := map[string]map[string]any{}
	var provisionerArgs []string
	schedulerBound := false
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRoleBinding":
			// kubeadm's kube-scheduler identity may use Reservations.
			for _, s := range o.Object["subjects"].([]any) {
				if s.(map[string]any)["name"] == "system:kube-scheduler" && o.Object["roleRef"].(map[string]any)["name"] == "gantry:kube-scheduler" {
					schedulerBound = true
				}
			}
		case "Deployment":
			containers := o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
			c := containers[0].(map[string]any)
			images[o.GetName()] = c["image"].(string)
			if o.GetName() == "gantry-provisioner" {
				for _, a := range c["args"].([]any) {
					provisionerArgs = append(provisionerArgs, a.(string))
				}
			}
		case "ConfigMap":
			if o.GetNamespace() == workloadsNamespace {
				configMaps[o.GetName()], _ = o.Object["data"].(map[string]any)
			}
		}
	}
	if want := "gantry.local/gantry-provisioner:" + r.kubeVersion; images["gantry-provisioner"] != want {
		t.Errorf("provisioner image %q, want %q", images["gantry-provisioner"], want)
	}
	if !strings.HasPrefix(images["kwok-controller"], "gantry.local/kwok:v0.") {
		t.Errorf("kwok image %q", images["kwok-controller"])
	}
	if got := configMaps["kube-scheduler-config"]["config.yaml"]; got != "kind: KubeSchedulerConfiguration # marker\n" {
		t.Errorf("kube-scheduler-config holds %q, not the cluster's scheduler configuration", got)
	}
	if got := configMaps["gantry-provisioner-node-groups"]["node-groups.yaml"]; got != cluster.NodeGroups {
		t.Errorf("node groups %q", got)
	}
	if !schedulerBound {
		t.Error("no ClusterRoleBinding gives system:kube-scheduler the role gantry:kube-scheduler")
	}
	for _, want := range []string{"--node-group-provider=kwok", "--scale-down-unneeded-time=" + cluster.ScaleDownUnneededTime.String(),
		"--simulation-budget=500", "--max-bookings-per-namespace=4"} {
		if !slices.Contains(provisionerArgs, want) {
			t.Errorf("provisioner args %q lack %q", provisionerArgs, want)
		}
	}
}

// On the stock control plane the workloads are kind/config/managed-addons:
// Gantry's scheduler and webhook too, the overlay's scheduler configuration
// (the second scheduler's profiles), and nothing bound to the cluster's own
// kube-scheduler.
func TestRenderWorkloadsStock(t *testing.T) {
	root := checkout(t)
	r, err := newRuntime(&cluster.Options{Root: root, Name: "s", WorkDir: t.TempDir(), ControlPlane: cluster.ControlPlaneStock,
		SchedulerConfig: "/nonexistent: the stock control plane does not read it"})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := r.RenderWorkloads()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			images[o.GetName()] = containers[0].(map[string]any)["image"].(string)
		case "ConfigMap":
			if o.GetName() == "kube-scheduler-config" {
				cfg, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
				if !strings.Contains(cfg, "schedulerName: gantry-scheduler") || strings.Contains(cfg, "default-scheduler") {
					t.Errorf("kube-scheduler-config is not the second scheduler's:\n%s", cfg)
				}
			}
		case "ClusterRoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if s.(map[string]any)["name"] == "system:kube-scheduler" {
					t.Errorf("ClusterRoleBinding %s binds the cluster's kube-scheduler", o.GetName())
				}
			}
		}
	}
	for name, want := range map[string]string{
		"gantry-provisioner": "gantry.local/gantry-provisioner:" + r.kubeVersion,
		"gantry-scheduler":   "gantry.local/kube-scheduler:" + r.kubeVersion,
		"gantry-webhook":     "gantry.local/gantry-webhook:" + r.kubeVersion,
	} {
		if images[name] != want {
			t.Errorf("%s image %q, want %q", name, images[name], want)
		}
	}
	if got := r.Workloads(); len(got) != 4 {
		t.Errorf("workloads %v, want the provisioner, kwok, Gantry's scheduler and webhook", got)
	}
}

// A cluster's recorded control plane wins over the flag, so that status and
// down need none; a record that says neither is an error.
func TestRecordedControlPlane(t *testing.T) {
	root := checkout(t)
	work := t.TempDir()
	o := &cluster.Options{Root: root, Name: "c", WorkDir: work, ControlPlane: cluster.ControlPlaneGantry}
	r, err := newRuntime(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(r.dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	for record, want := range map[string]string{"stock\n": cluster.ControlPlaneStock, "gantry": cluster.ControlPlaneGantry, "bogus\n": ""} {
		if err := os.WriteFile(r.controlPlaneFile(), []byte(record), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := newRuntime(o)
		switch {
		case want == "" && err == nil:
			t.Errorf("record %q accepted", record)
		case want != "" && err != nil:
			t.Errorf("record %q: %v", record, err)
		case want != "" && (got.plane != want || len(got.Workloads()) != map[string]int{"stock": 4, "gantry": 2}[want]):
			t.Errorf("record %q: control plane %q, workloads %v", record, got.plane, got.Workloads())
		}
	}
}

// checkout is the repository root, from this package's directory.
func checkout(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestSplitStatus(t *testing.T) {
	code, body, err := splitStatus([]byte("line 1\nline 2\n\n204"))
	if err != nil || code != 204 || string(body) != "line 1\nline 2\n" {
		t.Errorf("got %d %q %v", code, body, err)
	}
	for _, bad := range []string{"", "no status", "body\nabc", "body\n42"} {
		if _, _, err := splitStatus([]byte(bad)); err == nil {
			t.Errorf("splitStatus(%q) accepted", bad)
		}
	}
}

func TestRemoveEmptyKubeconfig(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	full := filepath.Join(dir, "full")
	_ = os.WriteFile(empty, []byte("apiVersion: v1\nkind: Config\nclusters: null\ncontexts: null\n"), 0o600)
	_ = os.WriteFile(full, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: https://x}\n"), 0o600)
	for _, p := range []string{empty, full, filepath.Join(dir, "absent")} {
		if err := removeEmptyKubeconfig(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Error("an emptied kubeconfig was kept")
	}
	if _, err := os.Stat(full); err != nil {
		t.Error("a kubeconfig with another cluster was removed")
	}
}

func TestParseContainers(t *testing.T) {
	id := func(c byte) string { return strings.Repeat(string(c), 64) }
	out := "log kube-scheduler-gantry-control-plane_kube-system_kube-scheduler-" + id('b') + ".log\n" +
		"log kube-scheduler-gantry-control-plane_kube-system_kube-scheduler-" + id('a') + ".log\n" +
		"log gantry-provisioner-f8b85c6ff-l6kf6_gantry-system_provisioner-" + id('c') + ".log\n" +
		"log not-a-container-log.txt\n" +
		"task " + id('b') + " 4242 RUNNING\n" +
		"task " + id('a') + " 0 STOPPED\n" +
		"task " + id('c') + " 77 STOPPED\n"
	got := parseContainers(out)
	want := []nodeContainer{
		{ID: id('b'), Name: "kube-scheduler", Pod: "kube-scheduler-gantry-control-plane", Running: true},
		{ID: id('a'), Name: "kube-scheduler", Pod: "kube-scheduler-gantry-control-plane"},
		{ID: id('c'), Name: "provisioner", Pod: "gantry-provisioner-f8b85c6ff-l6kf6"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Name != want[i].Name || got[i].Pod != want[i].Pod || got[i].Running != want[i].Running || !strings.HasSuffix(got[i].Log, want[i].ID+".log") {
			t.Errorf("container %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestCRILogText(t *testing.T) {
	in := "2026-11-25T17:23:47.45Z stderr F I1125 serving.go:411] Generated cert\n2026-11-25T17:23:47.46Z stdout P partial line\n"
	if got, want := criLogText(in), "I1125 serving.go:411] Generated cert\npartial line\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestGangScheduling: the variant sets the gate and the API in kubeadm's
// components, and the add-ons take the PodGroup requests' component (with
// its rights and flag) and, on the stock control plane, the gate in
// gantry-scheduler; without it, neither.
func TestGangScheduling(t *testing.T) {
	c, err := clusterConfig(configParams{Name: "g", NodeImage: "n", ImageRepository: "r", SchedulerConfig: "/s", GangScheduling: true})
	if err != nil {
		t.Fatal(err)
	}
	if !c.FeatureGates[cluster.GangFeatureGate] || c.RuntimeConfig[cluster.GangRuntimeConfig] != "true" {
		t.Errorf("feature gates %v, runtime config %v", c.FeatureGates, c.RuntimeConfig)
	}
	if c, _ := clusterConfig(configParams{Name: "g", NodeImage: "n", ImageRepository: "r", SchedulerConfig: "/s"}); len(c.FeatureGates)+len(c.RuntimeConfig) != 0 {
		t.Errorf("without the variant: feature gates %v, runtime config %v", c.FeatureGates, c.RuntimeConfig)
	}

	root := checkout(t)
	schedulerConfig := filepath.Join(t.TempDir(), "scheduler.yaml")
	if err := os.WriteFile(schedulerConfig, []byte("kind: KubeSchedulerConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		plane          string
		gangs, gateArg bool
	}{
		{cluster.ControlPlaneGantry, true, false},
		{cluster.ControlPlaneStock, true, true},
		{cluster.ControlPlaneStock, false, false},
	} {
		r, err := newRuntime(&cluster.Options{Root: root, Name: "g", WorkDir: t.TempDir(), ControlPlane: tc.plane,
			SchedulerConfig: schedulerConfig, GangScheduling: tc.gangs})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := r.RenderWorkloads()
		if err != nil {
			t.Fatal(err)
		}
		args := map[string][]string{}
		role := false
		for _, o := range objs {
			switch o.GetKind() {
			case "Deployment":
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				a, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
				args[o.GetName()] = a
			case "ClusterRole":
				role = role || o.GetName() == "gantry-provisioner-pod-group-requests"
			}
		}
		requests := slices.Contains(args["gantry-provisioner"], "--pod-group-requests-class=check-capacity.autoscaling.x-k8s.io")
		gate := slices.Contains(args["gantry-scheduler"], "--feature-gates=GenericWorkload=true")
		if requests != tc.gangs || role != tc.gangs || gate != tc.gateArg {
			t.Errorf("%s, gang scheduling %v: provisioner flag %v, its ClusterRole %v, gantry-scheduler's gate %v; want %v, %v, %v",
				tc.plane, tc.gangs, requests, role, gate, tc.gangs, tc.gangs, tc.gateArg)
		}
	}
}
