package kind

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
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
