package kind

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kindnodes "sigs.k8s.io/kind/pkg/cluster/nodes"

	gantrynodes "github.com/gantry-dev/gantry/kind/pkg/nodes"
)

// Node is what the pod network needs to know of a node.
type Node struct {
	Name string
	// IP is the node's address on the Docker network.
	IP netip.Addr
	// PodCIDR is the range the node controller gave the node.
	PodCIDR netip.Prefix
}

// cniConfig is the node's CNI configuration: a point-to-point link per pod
// (ptp) with addresses from the node's pod range, masquerading traffic that
// leaves the pod network, and host ports (portmap). Pods on other nodes are
// reached through the routes of podRoutes; the nodes share one Docker network.
func cniConfig(n Node, clusterCIDR netip.Prefix) ([]byte, error) {
	if !n.PodCIDR.IsValid() || !clusterCIDR.Contains(n.PodCIDR.Addr()) {
		return nil, fmt.Errorf("node %s: pod range %v is not inside the cluster's %v", n.Name, n.PodCIDR, clusterCIDR)
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "gantry",
		"plugins": []any{
			map[string]any{
				"type":   "ptp",
				"ipMasq": true,
				"mtu":    1500,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": n.PodCIDR.String()}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// podRoutes are the routes node self needs to every other node's pods: the
// other node's pod range via its address.
func podRoutes(self Node, nodes []Node) ([][]string, error) {
	var out [][]string
	sorted := append([]Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, n := range sorted {
		if n.Name == self.Name {
			continue
		}
		if !n.IP.IsValid() || !n.PodCIDR.IsValid() {
			return nil, fmt.Errorf("node %s has no address or pod range yet", n.Name)
		}
		if n.PodCIDR.Overlaps(self.PodCIDR) {
			return nil, fmt.Errorf("nodes %s and %s have overlapping pod ranges %v and %v", self.Name, n.Name, self.PodCIDR, n.PodCIDR)
		}
		out = append(out, []string{"ip", "route", "replace", n.PodCIDR.String(), "via", n.IP.String()})
	}
	return out, nil
}

// cniConfigPath is where the nodes' container runtime finds the pod
// network's configuration.
const cniConfigPath = "/etc/cni/net.d/10-gantry.conflist"

// setupNodes makes the pod network of every node once kube-controller-
// manager has given each its pod range: the CNI configuration, IP
// forwarding and the routes to the other nodes' pods. It runs after create
// and after the nodes restart (routes live in the nodes' network
// namespaces), and returns when every node is Ready.
func (r *Runtime) setupNodes(ctx context.Context) error {
	client, err := r.client()
	if err != nil {
		return err
	}
	containers, err := r.nodes()
	if err != nil {
		return err
	}
	want := len(containers)
	var nodes []Node
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, r.timeout(), true, func(ctx context.Context) (bool, error) {
		nodes, err = r.podNetworkNodes(ctx, client, containers)
		return err == nil && len(nodes) == want, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d nodes registered with a pod range within %s (kube-controller-manager allocates them)", len(nodes), want, r.timeout())
	}
	clusterCIDR := netip.MustParsePrefix(podSubnet)
	for _, c := range containers {
		var self Node
		for _, n := range nodes {
			if n.Name == c.String() {
				self = n
			}
		}
		conf, err := cniConfig(self, clusterCIDR)
		if err != nil {
			return err
		}
		routes, err := podRoutes(self, nodes)
		if err != nil {
			return err
		}
		cmds := append([][]string{
			{"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
			{"sh", "-c", "mkdir -p " + path.Dir(cniConfigPath) + " && cat >" + cniConfigPath + ".tmp && mv " + cniConfigPath + ".tmp " + cniConfigPath},
		}, routes...)
		for i, cmd := range cmds {
			run := c.CommandContext(ctx, cmd[0], cmd[1:]...)
			if i == 1 {
				run.SetStdin(bytes.NewReader(conf))
			}
			if err := run.Run(); err != nil {
				return r.kindError("setting up the pod network on node "+c.String(), err)
			}
		}
	}
	return r.waitNodesReady(ctx, client, want)
}

// podNetworkNodes returns the nodes that have registered with a pod range,
// with their address on the Docker network.
func (r *Runtime) podNetworkNodes(ctx context.Context, client kubernetes.Interface, containers []kindnodes.Node) ([]Node, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []Node
	for _, c := range containers {
		for _, n := range list.Items {
			if n.Name != c.String() || n.Spec.PodCIDR == "" {
				continue
			}
			cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil {
				return nil, fmt.Errorf("node %s: pod range %q: %w", n.Name, n.Spec.PodCIDR, err)
			}
			ipv4, _, err := c.IP()
			if err != nil {
				return nil, fmt.Errorf("address of node %s: %w", c, err)
			}
			ip, err := netip.ParseAddr(ipv4)
			if err != nil {
				return nil, fmt.Errorf("address of node %s: %w", c, err)
			}
			out = append(out, Node{Name: n.Name, IP: ip, PodCIDR: cidr})
		}
	}
	return out, nil
}

func (r *Runtime) waitNodesReady(ctx context.Context, client kubernetes.Interface, want int) error {
	var notReady []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, r.timeout(), true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!" + gantrynodes.ManagedLabel})
		if err != nil {
			return false, nil
		}
		notReady = notReady[:0]
		for i := range list.Items {
			if !gantrynodes.IsReady(&list.Items[i]) {
				notReady = append(notReady, list.Items[i].Name)
			}
		}
		return len(list.Items) >= want && len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready after %s: %s", r.timeout(), strings.Join(notReady, ", "))
	}
	return nil
}

// client is an admin client of the cluster.
func (r *Runtime) client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.o.KubeconfigPath)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", r.o.KubeconfigPath, err)
	}
	return kubernetes.NewForConfig(cfg)
}
