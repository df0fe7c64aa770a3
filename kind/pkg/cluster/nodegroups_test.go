package cluster

import (
	"testing"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups/kwok"
)

// The node groups the provisioner of every runtime starts with are a valid
// kwok provider configuration, with the groups the e2e specs use.
func TestNodeGroups(t *testing.T) {
	c, err := kwok.ParseConfig([]byte(NodeGroups))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, g := range c.NodeGroups {
		names[g.Name] = true
	}
	if !names["general"] || !names["flaky"] || len(names) != 2 {
		t.Errorf("node groups %v, want general and flaky", names)
	}
}
