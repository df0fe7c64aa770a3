package kind

import (
	"fmt"
	"strings"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
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
	// NodeImage is Gantry's node image, e.g. gantry.local/kind-node:v1.36.3.
	NodeImage string
	// ImageRepository is where kubeadm takes the control-plane images from:
	// the registry part of the preloaded images (gantry.local).
	ImageRepository string
	// SchedulerConfig is the host path of the KubeSchedulerConfiguration.
	SchedulerConfig string
	// APIServerArgs are extra kube-apiserver flags, "name=value".
	APIServerArgs []string
}

// clusterConfig is the kind configuration of a Gantry cluster: Gantry's node
// image on every node; kubeadm told to take every control-plane image from
// the preloaded ones; Gantry's kube-scheduler configuration; no default CNI
// (the runtime installs Gantry's, see network.go) and kube-proxy in nftables
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
	clusterConfiguration := "kind: ClusterConfiguration\n" +
		"imageRepository: " + p.ImageRepository + "\n" +
		"scheduler:\n" +
		"  extraArgs:\n" +
		"  - name: config\n" +
		"    value: " + schedulerConfigFile + "\n" +
		"  extraVolumes:\n" +
		"  - name: gantry-scheduler-config\n" +
		"    hostPath: " + schedulerConfigDir + "\n" +
		"    mountPath: " + schedulerConfigDir + "\n" +
		"    readOnly: true\n" +
		"    pathType: Directory\n"
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
		},
		KubeadmConfigPatches: []string{clusterConfiguration, kubelet},
	}
	c.Nodes = append(c.Nodes, v1alpha4.Node{
		Role:  v1alpha4.ControlPlaneRole,
		Image: p.NodeImage,
		ExtraMounts: []v1alpha4.Mount{{
			HostPath: p.SchedulerConfig, ContainerPath: schedulerConfigFile, Readonly: true,
		}},
	})
	for i := 0; i < p.Workers; i++ {
		c.Nodes = append(c.Nodes, v1alpha4.Node{Role: v1alpha4.WorkerRole, Image: p.NodeImage})
	}
	v1alpha4.SetDefaultsCluster(c)
	return c, nil
}
