package kind

import (
	"fmt"
	"strings"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// Paths inside the control-plane node.
const (
	// schedulerConfigDir holds Gantry's KubeSchedulerConfiguration, mounted
	// from the host into the node and from the node into the static pod.
	schedulerConfigDir  = "/etc/kubernetes/gantry"
	schedulerConfigFile = schedulerConfigDir + "/kube-scheduler.yaml"
	// podSubnet is the cluster's pod range (kind's default), split per node
	// by kube-controller-manager.
	podSubnet = "10.244.0.0/16"
)

// configParams are what a Gantry kind cluster is made of.
type configParams struct {
	Name    string
	Workers int
	// NodeImage is Gantry's node image, e.g. gantry.local/kind-node:v1.37.2.
	NodeImage string
	// ImageRepository is where kubeadm takes the control-plane images from:
	// the registry part of the preloaded images (gantry.local).
	ImageRepository string
	// SchedulerConfig is the host path of the KubeSchedulerConfiguration
	// (nodeSchedulerConfig's output) of Gantry's kube-scheduler.
	SchedulerConfig string
	// StockPatches, for the stock control plane instead, is the host
	// directory of kubeadm's patches (stockPatches) that run upstream's
	// kube-apiserver and kube-scheduler.
	StockPatches string
	// APIServerArgs are extra kube-apiserver flags, "name=value".
	APIServerArgs []string
	// APIServerPort is the host port of kube-apiserver; 0 lets Docker pick.
	APIServerPort int
	// GangScheduling turns gang scheduling's gate on in every component
	// kubeadm runs, and serves its API.
	GangScheduling bool
}

// clusterConfig is the kind configuration of a Gantry cluster: Gantry's node
// image on every node; kubeadm told to take every control-plane image from
// the preloaded ones; Gantry's kube-scheduler configuration, or for the stock
// control plane kubeadm's patches to upstream's images; no default CNI (the
// runtime installs Gantry's, see network.go) and kube-proxy in nftables
// mode; kubelet allowed to run on cgroup v1 hosts.
func clusterConfig(p configParams) (*v1alpha4.Cluster, error) {
	if p.Workers < 0 {
		return nil, fmt.Errorf("--nodes must be 0 or more, got %d", p.Workers)
	}
	var apiServerArgs strings.Builder
	for _, a := range p.APIServerArgs {
		name, value, ok := strings.Cut(a, "=")
		name = strings.TrimPrefix(name, "--")
		if !ok || name == "" {
			return nil, fmt.Errorf("apiserver flag %q: want name=value", a)
		}
		fmt.Fprintf(&apiServerArgs, "  - name: %q\n    value: %q\n", name, value)
	}
	if (p.SchedulerConfig == "") == (p.StockPatches == "") {
		return nil, fmt.Errorf("a cluster runs either Gantry's scheduler configuration or the stock control plane's patches")
	}
	clusterConfiguration := "kind: ClusterConfiguration\n" +
		"imageRepository: " + p.ImageRepository + "\n"
	if p.SchedulerConfig != "" {
		clusterConfiguration += "scheduler:\n" +
			"  extraArgs:\n" +
			"  - name: config\n" +
			"    value: " + schedulerConfigFile + "\n" +
			"  extraVolumes:\n" +
			"  - name: gantry-scheduler-config\n" +
			"    hostPath: " + schedulerConfigDir + "\n" +
			"    mountPath: " + schedulerConfigDir + "\n" +
			"    readOnly: true\n" +
			"    pathType: Directory\n"
	}
	if apiServerArgs.Len() > 0 {
		clusterConfiguration += "apiServer:\n  extraArgs:\n" + apiServerArgs.String()
	}
	// Kubernetes 1.35+ kubelet refuses cgroup v1 unless told otherwise; on a
	// cgroup v2 host the setting changes nothing.
	kubelet := "kind: KubeletConfiguration\nfailCgroupV1: false\n"

	c := &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:     p.Name,
		Networking: v1alpha4.Networking{
			DisableDefaultCNI: true,
			KubeProxyMode:     v1alpha4.NFTablesProxyMode,
			PodSubnet:         podSubnet,
			APIServerPort:     int32(p.APIServerPort),
		},
		KubeadmConfigPatches: []string{clusterConfiguration, kubelet},
	}
	if p.GangScheduling {
		c.FeatureGates = map[string]bool{cluster.GangFeatureGate: true}
		c.RuntimeConfig = map[string]string{cluster.GangRuntimeConfig: "true"}
	}
	cp := v1alpha4.Node{Role: v1alpha4.ControlPlaneRole, Image: p.NodeImage}
	if p.SchedulerConfig != "" {
		cp.ExtraMounts = []v1alpha4.Mount{{HostPath: p.SchedulerConfig, ContainerPath: schedulerConfigFile, Readonly: true}}
	} else {
		// kubeadm init patches the static pods of kube-apiserver and
		// kube-scheduler with the files of the mounted directory.
		cp.ExtraMounts = []v1alpha4.Mount{{HostPath: p.StockPatches, ContainerPath: stockPatchesDir, Readonly: true}}
		c.KubeadmConfigPatches = append(c.KubeadmConfigPatches,
			"kind: InitConfiguration\npatches:\n  directory: "+stockPatchesDir+"\n")
	}
	c.Nodes = append(c.Nodes, cp)
	for i := 0; i < p.Workers; i++ {
		c.Nodes = append(c.Nodes, v1alpha4.Node{Role: v1alpha4.WorkerRole, Image: p.NodeImage})
	}
	v1alpha4.SetDefaultsCluster(c)
	return c, nil
}

// stockPatchesDir holds, in the control-plane node, kubeadm's patches of the
// stock control plane.
const stockPatchesDir = "/etc/kubernetes/gantry-stock-patches"

// stockPatches are kubeadm's patches (file name to content) that make the
// static pods of kube-apiserver and kube-scheduler run upstream's images,
// <repository>/<name>-upstream:<tag>, built unpatched from the same pins
// (release/image). Everything else of the control plane is the same as
// Gantry's: kube-controller-manager, etcd, CoreDNS and kube-proxy are
// upstream's already.
func stockPatches(repository, tag string) map[string][]byte {
	out := map[string][]byte{}
	for _, name := range []string{"kube-apiserver", "kube-scheduler"} {
		out[name+"+strategic.yaml"] = []byte("spec:\n  containers:\n  - name: " + name + "\n" +
			"    image: " + repository + "/" + name + "-upstream:" + tag + "\n")
	}
	return out
}

// schedulerKubeconfig is the kubeconfig kubeadm writes for kube-scheduler.
const schedulerKubeconfig = "/etc/kubernetes/scheduler.conf"

// nodeSchedulerConfig is the KubeSchedulerConfiguration kube-scheduler runs
// with in the node: the cluster's, with the client connection kubeadm made
// for it. kubeadm passes --kubeconfig, but kube-scheduler ignores its flags
// for what a --config file sets, and defaults the file's kubeconfig to none.
// A file that names a kubeconfig of its own is refused: no host path means
// anything inside the node.
func nodeSchedulerConfig(data []byte) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("scheduler configuration: %w", err)
	}
	if cfg["kind"] != "KubeSchedulerConfiguration" {
		return nil, fmt.Errorf("scheduler configuration: kind %v, want KubeSchedulerConfiguration", cfg["kind"])
	}
	conn, _ := cfg["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	if kc, _ := conn["kubeconfig"].(string); kc != "" && kc != schedulerKubeconfig {
		return nil, fmt.Errorf("scheduler configuration: clientConnection.kubeconfig %q: on a kind node kube-scheduler uses kubeadm's %s; leave it unset", kc, schedulerKubeconfig)
	}
	conn["kubeconfig"] = schedulerKubeconfig
	cfg["clientConnection"] = conn
	return yaml.Marshal(cfg)
}
