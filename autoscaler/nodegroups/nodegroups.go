// Package nodegroups is the interface gantry-provisioner adds and removes
// nodes through, shaped like cluster-autoscaler's cloudprovider.NodeGroup
// so that the provisioning logic could be carried into a cluster-autoscaler
// build: a group of identical nodes with a size range, a template node for
// simulation, and calls to grow and shrink it.
package nodegroups

import (
	"context"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Labels the provisioner's node groups put on the nodes they create.
const (
	// LabelNodeGroup names the group a node belongs to.
	LabelNodeGroup = "autoscaling.gantry.dev/node-group"
	// LabelAttempt names the scale-up attempt that created a node, so that
	// a failed attempt is rolled back node for node and nothing else.
	LabelAttempt = "autoscaling.gantry.dev/scale-up-attempt"
)

// TaintUninitialized is on a new node until its cloud controller has set
// it up; until then no pod can run there.
const TaintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

// NodeGroup is a set of identical nodes.
type NodeGroup interface {
	// ID names the group.
	ID() string
	// MinSize and MaxSize bound the group's size.
	MinSize() int
	MaxSize() int
	// TargetSize is how many nodes the group has or is creating.
	TargetSize(ctx context.Context) (int, error)
	// IncreaseSize creates delta nodes for a scale-up attempt and returns
	// their names. It fails, creating nothing, if the group would exceed
	// MaxSize.
	IncreaseSize(ctx context.Context, delta int, attempt string) ([]string, error)
	// DeleteNodes removes nodes of the group. A node already gone is fine.
	DeleteNodes(ctx context.Context, names []string) error
	// Nodes lists the group's nodes.
	Nodes(ctx context.Context) ([]*v1.Node, error)
	// TemplateNode is a node as the group creates it, for simulation.
	TemplateNode() *v1.Node
}

// Provider is a set of node groups.
type Provider interface {
	// NodeGroups lists the groups.
	NodeGroups() []NodeGroup
	// NodeGroupForNode is the group of a node, or false for a node no
	// group owns (the provisioner never removes those).
	NodeGroupForNode(*v1.Node) (NodeGroup, bool)
}

// Refresher is a Provider that must be called now and then to bring the
// cluster up to date with it (Cluster API: labelling the nodes of new
// machines), as cluster-autoscaler calls CloudProvider.Refresh every loop.
// The provisioner calls it before it looks for an attempt's nodes and
// before each scale-down pass.
type Refresher interface {
	Refresh(ctx context.Context) error
}

// Refresh refreshes p if it is a Refresher.
func Refresh(ctx context.Context, p Provider) error {
	if rf, ok := p.(Refresher); ok {
		if err := rf.Refresh(ctx); err != nil {
			return fmt.Errorf("refreshing the node-group provider: %w", err)
		}
	}
	return nil
}

// AttemptRollbacker is a NodeGroup that can undo a scale-up attempt
// itself, including what has no Node yet (a cloud machine still booting).
type AttemptRollbacker interface {
	RollBack(ctx context.Context, attempt string) error
}

// RollBack removes every node a scale-up attempt added to g, but those
// keep reports (nil: none), and returns how many nodes it deleted. The
// attempt's nodes are those with its label. Groups that implement
// AttemptRollbacker undo the attempt themselves when no node is kept;
// otherwise only the other nodes are deleted.
func RollBack(ctx context.Context, g NodeGroup, attempt string, keep func(context.Context, *v1.Node) (bool, error)) (int, error) {
	if attempt == "" {
		return 0, nil
	}
	nodes, err := g.Nodes(ctx)
	if err != nil {
		return 0, err
	}
	var names []string
	kept := 0
	for _, n := range nodes {
		if n.Labels[LabelAttempt] != attempt {
			continue
		}
		if keep != nil {
			k, err := keep(ctx, n)
			if err != nil {
				return 0, err
			}
			if k {
				kept++
				continue
			}
		}
		names = append(names, n.Name)
	}
	if r, ok := g.(AttemptRollbacker); ok && kept == 0 {
		return len(names), r.RollBack(ctx, attempt)
	}
	if len(names) == 0 {
		return 0, nil
	}
	return len(names), g.DeleteNodes(ctx, names)
}

// Config is a provider's configuration: it reports every problem it has.
type Config[T any] interface {
	*T
	Validate() error
}

// ParseConfig decodes a provider's configuration (YAML or JSON, unknown
// fields rejected) and validates it; what names it in errors. On a
// validation error it returns the decoded configuration as well.
func ParseConfig[T any, PT Config[T]](data []byte, what string) (*T, error) {
	c := new(T)
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return c, PT(c).Validate()
}

// LoadConfig reads a provider's configuration file and parses it as
// ParseConfig does.
func LoadConfig[T any, PT Config[T]](path, what string) (*T, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig[T, PT](data, what)
}
