package kind

import (
	"strings"
	"testing"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

func TestClusterConfig(t *testing.T) {
	c, err := clusterConfig(configParams{
		Name: "gantry", Workers: 2, NodeImage: "gantry.local/kind-node:v1.36.3", ImageRepository: "gantry.local",
		SchedulerConfig: "/src/kind/config/kube-scheduler.yaml", APIServerArgs: []string{"--v=2", "audit-log-maxage=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nodes) != 3 || c.Nodes[0].Role != v1alpha4.ControlPlaneRole || c.Nodes[2].Role != v1alpha4.WorkerRole {
		t.Fatalf("nodes: %+v", c.Nodes)
	}
	for _, n := range c.Nodes {
		if n.Image != "gantry.local/kind-node:v1.36.3" {
			t.Errorf("node %s image %q", n.Role, n.Image)
		}
	}
	if m := c.Nodes[0].ExtraMounts; len(m) != 1 || m[0].ContainerPath != schedulerConfigFile || !m[0].Readonly {
		t.Errorf("control-plane mounts %+v", m)
	}
	if !c.Networking.DisableDefaultCNI || c.Networking.KubeProxyMode != v1alpha4.NFTablesProxyMode || c.Networking.PodSubnet != podSubnet {
		t.Errorf("networking %+v", c.Networking)
	}
	// The patches must be valid YAML that says what the runtime relies on.
	var cc struct {
		Kind            string
		ImageRepository string `json:"imageRepository"`
		Scheduler       struct {
			ExtraArgs []struct{ Name, Value string } `json:"extraArgs"`
		}
		APIServer struct {
			ExtraArgs []struct{ Name, Value string } `json:"extraArgs"`
		} `json:"apiServer"`
	}
	if err := yaml.Unmarshal([]byte(c.KubeadmConfigPatches[0]), &cc); err != nil {
		t.Fatalf("%v\n%s", err, c.KubeadmConfigPatches[0])
	}
	if cc.Kind != "ClusterConfiguration" || cc.ImageRepository != "gantry.local" ||
		len(cc.Scheduler.ExtraArgs) != 1 || cc.Scheduler.ExtraArgs[0].Value != schedulerConfigFile ||
		len(cc.APIServer.ExtraArgs) != 2 || cc.APIServer.ExtraArgs[0].Name != "v" || cc.APIServer.ExtraArgs[1].Value != "1" {
		t.Errorf("ClusterConfiguration patch:\n%s", c.KubeadmConfigPatches[0])
	}
	if !strings.Contains(c.KubeadmConfigPatches[1], "failCgroupV1: false") {
		t.Errorf("KubeletConfiguration patch:\n%s", c.KubeadmConfigPatches[1])
	}

	if _, err := clusterConfig(configParams{Workers: 1, SchedulerConfig: "/a", StockPatches: "/b"}); err == nil {
		t.Error("a configuration with both Gantry's scheduler and the stock patches accepted")
	}
	if _, err := clusterConfig(configParams{Workers: -1}); err == nil {
		t.Error("negative workers accepted")
	}
	if _, err := clusterConfig(configParams{APIServerArgs: []string{"novalue"}}); err == nil {
		t.Error("an apiserver flag without a value accepted")
	}
}

// The stock control plane: no Gantry scheduler configuration; kubeadm init
// patches kube-apiserver and kube-scheduler to upstream's images, from the
// mounted directory.
func TestClusterConfigStock(t *testing.T) {
	c, err := clusterConfig(configParams{
		Name: "stock", Workers: 1, NodeImage: "gantry.local/kind-node:v1.36.3", ImageRepository: "gantry.local",
		StockPatches: "/work/stock-patches",
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.KubeadmConfigPatches[0], "scheduler:") {
		t.Errorf("ClusterConfiguration patch configures the scheduler:\n%s", c.KubeadmConfigPatches[0])
	}
	var ic struct {
		Kind    string
		Patches struct{ Directory string }
	}
	if len(c.KubeadmConfigPatches) != 3 {
		t.Fatalf("patches %q, want ClusterConfiguration, KubeletConfiguration, InitConfiguration", c.KubeadmConfigPatches)
	}
	if err := yaml.Unmarshal([]byte(c.KubeadmConfigPatches[2]), &ic); err != nil || ic.Kind != "InitConfiguration" || ic.Patches.Directory != stockPatchesDir {
		t.Errorf("InitConfiguration patch (%v):\n%s", err, c.KubeadmConfigPatches[2])
	}
	if m := c.Nodes[0].ExtraMounts; len(m) != 1 || m[0].HostPath != "/work/stock-patches" || m[0].ContainerPath != stockPatchesDir || !m[0].Readonly {
		t.Errorf("control-plane mounts %+v", m)
	}

	files := stockPatches("gantry.local", "v1.36.3")
	for _, name := range []string{"kube-apiserver", "kube-scheduler"} {
		var patch struct {
			Spec struct {
				Containers []struct{ Name, Image string }
			}
		}
		data, ok := files[name+"+strategic.yaml"]
		if !ok {
			t.Fatalf("no patch of %s: %v", name, files)
		}
		if err := yaml.UnmarshalStrict(data, &patch); err != nil {
			t.Fatal(err)
		}
		if c := patch.Spec.Containers; len(c) != 1 || c[0].Name != name || c[0].Image != "gantry.local/"+name+"-upstream:v1.36.3" {
			t.Errorf("patch of %s:\n%s", name, data)
		}
	}
	if len(files) != 2 {
		t.Errorf("patches %v, want kube-apiserver's and kube-scheduler's only", files)
	}
}

func TestNodeSchedulerConfig(t *testing.T) {
	out, err := nodeSchedulerConfig([]byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kubeconfig: " + schedulerKubeconfig, "schedulerName: default-scheduler"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("node configuration lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{
		"kind: KubeSchedulerConfiguration\nclientConnection: {kubeconfig: /root/.kube/config}\n",
		"kind: KubeProxyConfiguration\n",
		"{not yaml",
	} {
		if _, err := nodeSchedulerConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
