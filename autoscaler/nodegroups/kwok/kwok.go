// Package kwok is a node-group provider of kwok nodes: groups come from a
// configuration file, and growing a group creates Node objects that the
// kwok controller makes Ready. A failure-injection knob leaves chosen nodes
// unmanaged (never Ready) or fails creates, for tests of rollback.
package kwok

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
)

// KwokAnnotation on a Node hands it to the kwok controller, which makes it
// Ready.
const KwokAnnotation = "kwok.x-k8s.io/node"

// Config is the provider's configuration file.
type Config struct {
	NodeGroups []GroupConfig `json:"nodeGroups"`
}

// GroupConfig is one node group.
type GroupConfig struct {
	Name    string `json:"name"`
	MinSize int    `json:"minSize"`
	MaxSize int    `json:"maxSize"`
	// Labels and Taints of every node of the group.
	Labels map[string]string `json:"labels,omitempty"`
	Taints []v1.Taint        `json:"taints,omitempty"`
	// Capacity of every node (cpu, memory, pods, extended resources).
	Capacity v1.ResourceList `json:"capacity"`
	// FailureInjection, for tests.
	FailureInjection *FailureInjection `json:"failureInjection,omitempty"`
}

// FailureInjection makes a group misbehave.
type FailureInjection struct {
	// NeverReady: of each scale-up, this many nodes never come up: they
	// are created without the kwok annotation (a kwok controller that
	// manages annotated nodes only never makes them Ready) and with the
	// cloud provider's uninitialized taint, which nothing lifts (a kwok
	// controller that manages every node makes them Ready, but no pod
	// can run there).
	NeverReady int `json:"neverReady,omitempty"`
	// CreateErrors: this many node creates of each scale-up fail (after
	// the others succeeded), as a cloud API might.
	CreateErrors int `json:"createErrors,omitempty"`
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (*Config, error) {
	return nodegroups.LoadConfig[Config](path, "kwok node groups")
}

// ParseConfig parses and validates a configuration (YAML or JSON, unknown
// fields rejected). On a validation error it returns the parsed
// configuration as well as the error.
func ParseConfig(data []byte) (*Config, error) {
	return nodegroups.ParseConfig[Config](data, "kwok node groups")
}

// Validate reports every problem of the configuration.
func (c *Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, g := range c.NodeGroups {
		at := fmt.Sprintf("nodeGroups[%d]", i)
		if msgs := validation.IsDNS1123Label(g.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", at, g.Name, strings.Join(msgs, "; ")))
		}
		if seen[g.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: duplicate", at, g.Name))
		}
		seen[g.Name] = true
		if g.MinSize < 0 || g.MaxSize < g.MinSize || g.MaxSize > 10000 {
			errs = append(errs, fmt.Errorf("%s: sizes must satisfy 0 <= minSize <= maxSize <= 10000, got %d and %d", at, g.MinSize, g.MaxSize))
		}
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods} {
			if q, ok := g.Capacity[r]; !ok || q.Sign() <= 0 {
				errs = append(errs, fmt.Errorf("%s.capacity.%s must be positive", at, r))
			}
		}
		for k := range g.Labels {
			if k == nodegroups.LabelNodeGroup || k == nodegroups.LabelAttempt {
				errs = append(errs, fmt.Errorf("%s.labels: %s is set by the provider", at, k))
			}
		}
		if f := g.FailureInjection; f != nil && (f.NeverReady < 0 || f.CreateErrors < 0) {
			errs = append(errs, fmt.Errorf("%s.failureInjection: counts must not be negative", at))
		}
	}
	return errors.Join(errs...)
}

// Provider is the kwok node-group provider.
type Provider struct {
	groups []*group
}

var _ nodegroups.Provider = &Provider{}

// New returns the provider of c's groups, creating nodes with client.
func New(c *Config, client kubernetes.Interface) *Provider {
	p := &Provider{}
	for _, g := range c.NodeGroups {
		p.groups = append(p.groups, &group{cfg: g, client: client})
	}
	return p
}

// NodeGroups implements nodegroups.Provider.
func (p *Provider) NodeGroups() []nodegroups.NodeGroup {
	out := make([]nodegroups.NodeGroup, len(p.groups))
	for i, g := range p.groups {
		out[i] = g
	}
	return out
}

// NodeGroupForNode implements nodegroups.Provider.
func (p *Provider) NodeGroupForNode(n *v1.Node) (nodegroups.NodeGroup, bool) {
	id := n.Labels[nodegroups.LabelNodeGroup]
	for _, g := range p.groups {
		if g.cfg.Name == id {
			return g, true
		}
	}
	return nil, false
}

type group struct {
	cfg    GroupConfig
	client kubernetes.Interface
	mu     sync.Mutex // one resize at a time
}

func (g *group) ID() string   { return g.cfg.Name }
func (g *group) MinSize() int { return g.cfg.MinSize }
func (g *group) MaxSize() int { return g.cfg.MaxSize }

func (g *group) Nodes(ctx context.Context) ([]*v1.Node, error) {
	list, err := g.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=" + g.cfg.Name})
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Node, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (g *group) TargetSize(ctx context.Context) (int, error) {
	nodes, err := g.Nodes(ctx)
	return len(nodes), err
}

// TemplateNode implements nodegroups.NodeGroup.
func (g *group) TemplateNode() *v1.Node {
	return g.node(g.cfg.Name+"-template", "", true)
}

func (g *group) node(name, attempt string, managed bool) *v1.Node {
	labels := map[string]string{
		nodegroups.LabelNodeGroup: g.cfg.Name,
		v1.LabelHostname:          name,
		v1.LabelOSStable:          "linux",
		v1.LabelArchStable:        "amd64",
		"type":                    "kwok",
	}
	for k, v := range g.cfg.Labels {
		labels[k] = v
	}
	if attempt != "" {
		labels[nodegroups.LabelAttempt] = attempt
	}
	annotations := map[string]string{"node.alpha.kubernetes.io/ttl": "0"}
	taints := append([]v1.Taint(nil), g.cfg.Taints...)
	if managed {
		annotations[KwokAnnotation] = "fake"
	} else {
		taints = append(taints, v1.Taint{Key: nodegroups.TaintUninitialized, Value: "true", Effect: v1.TaintEffectNoSchedule})
	}
	capacity := g.cfg.Capacity.DeepCopy()
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       v1.NodeSpec{Taints: taints},
		Status:     v1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}
}

// IncreaseSize implements nodegroups.NodeGroup. Node names are the group,
// the attempt and an index: a retried call creates nothing twice.
func (g *group) IncreaseSize(ctx context.Context, delta int, attempt string) ([]string, error) {
	if delta <= 0 {
		return nil, fmt.Errorf("node group %s: size increase must be positive, got %d", g.cfg.Name, delta)
	}
	if msgs := validation.IsValidLabelValue(attempt); attempt == "" || len(msgs) > 0 {
		return nil, fmt.Errorf("node group %s: attempt %q is not a label value", g.cfg.Name, attempt)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	size, err := g.TargetSize(ctx)
	if err != nil {
		return nil, err
	}
	if size+delta > g.cfg.MaxSize {
		return nil, fmt.Errorf("node group %s: %d nodes and %d more exceed its maximum of %d", g.cfg.Name, size, delta, g.cfg.MaxSize)
	}
	var neverReady, createErrors int
	if f := g.cfg.FailureInjection; f != nil {
		neverReady, createErrors = f.NeverReady, f.CreateErrors
	}
	var names []string
	var errs []error
	for i := range delta {
		name := fmt.Sprintf("%s-%s-%d", g.cfg.Name, attempt, i)
		if i >= delta-createErrors {
			errs = append(errs, fmt.Errorf("creating node %s: injected failure", name))
			continue
		}
		n := g.node(name, attempt, i >= neverReady)
		if _, err := g.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("creating node %s: %w", name, err))
			continue
		}
		names = append(names, name)
	}
	return names, errors.Join(errs...)
}

// DeleteNodes implements nodegroups.NodeGroup; it refuses nodes of other
// groups and, like the Cluster API provider, deletes nothing if the group
// would be left with fewer than minSize nodes.
func (g *group) DeleteNodes(ctx context.Context, names []string) error {
	var errs []error
	var targets []*v1.Node
	for _, name := range names {
		n, err := g.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n.Labels[nodegroups.LabelNodeGroup] != g.cfg.Name {
			errs = append(errs, fmt.Errorf("node %s does not belong to node group %s", name, g.cfg.Name))
			continue
		}
		if !slices.ContainsFunc(targets, func(t *v1.Node) bool { return t.Name == n.Name }) {
			targets = append(targets, n)
		}
	}
	if len(targets) > 0 {
		size, err := g.TargetSize(ctx)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if size-len(targets) < g.cfg.MinSize {
			return errors.Join(append(errs, fmt.Errorf("node group %s: removing %d of %d nodes would leave fewer than its minimum of %d",
				g.cfg.Name, len(targets), size, g.cfg.MinSize))...)
		}
	}
	for _, n := range targets {
		name := n.Name
		err := g.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting node %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
