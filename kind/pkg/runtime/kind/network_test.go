package kind

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var clusterCIDR = netip.MustParsePrefix("10.244.0.0/16")

func node(name, ip, cidr string) Node {
	return Node{Name: name, IP: netip.MustParseAddr(ip), PodCIDR: netip.MustParsePrefix(cidr)}
}

func TestCNIConfig(t *testing.T) {
	b, err := cniConfig(node("w1", "172.18.0.3", "10.244.1.0/24"), clusterCIDR)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Name    string
		Plugins []struct {
			Type   string
			IPMasq bool
			IPAM   struct {
				Type   string
				Ranges [][]struct{ Subnet string }
			}
		}
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 2 || conf.Plugins[0].Type != "ptp" || !conf.Plugins[0].IPMasq ||
		conf.Plugins[0].IPAM.Type != "host-local" || conf.Plugins[0].IPAM.Ranges[0][0].Subnet != "10.244.1.0/24" ||
		conf.Plugins[1].Type != "portmap" {
		t.Errorf("config:\n%s", b)
	}
	if _, err := cniConfig(node("w1", "172.18.0.3", "10.9.0.0/24"), clusterCIDR); err == nil {
		t.Error("a pod range outside the cluster's was accepted")
	}
	if _, err := cniConfig(Node{Name: "w1"}, clusterCIDR); err == nil {
		t.Error("a node without a pod range was accepted")
	}
}

func TestPodRoutes(t *testing.T) {
	nodes := []Node{node("w2", "172.18.0.4", "10.244.2.0/24"), node("cp", "172.18.0.2", "10.244.0.0/24"), node("w1", "172.18.0.3", "10.244.1.0/24")}
	routes, err := podRoutes(nodes[2], nodes)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range routes {
		got = append(got, strings.Join(r, " "))
	}
	want := []string{"ip route replace 10.244.0.0/24 via 172.18.0.2", "ip route replace 10.244.2.0/24 via 172.18.0.4"}
	if !slices.Equal(got, want) {
		t.Errorf("routes %q, want %q", got, want)
	}
	if _, err := podRoutes(nodes[0], append(nodes, Node{Name: "new"})); err == nil {
		t.Error("a node without a pod range was routed")
	}
	if _, err := podRoutes(nodes[0], append(nodes, node("dup", "172.18.0.9", "10.244.2.0/25"))); err == nil {
		t.Error("overlapping pod ranges were routed")
	}
}
