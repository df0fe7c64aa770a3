package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
)

// lookupTimeout bounds the Machine read of NodeGroupForNode.
const lookupTimeout = 10 * time.Second

// Provider is the Cluster API node-group provider.
type Provider struct {
	groups []*Group
	byName map[string]*Group
	dyn    dynamic.Interface
}

var _ nodegroups.Provider = &Provider{}

// New returns the provider of c's groups. It reads the MachineDeployment of
// every group whose size bounds the configuration leaves out, and fails if
// one is missing or its annotations do not give valid bounds.
func New(ctx context.Context, c *Config, dyn dynamic.Interface, kube kubernetes.Interface) (*Provider, error) {
	p := &Provider{byName: map[string]*Group{}, dyn: dyn}
	var errs []error
	for _, cfg := range c.NodeGroups {
		g := &Group{cfg: cfg, dyn: dyn, kube: kube}
		if cfg.MinSize != nil && cfg.MaxSize != nil {
			g.minSize.Store(int64(*cfg.MinSize))
			g.maxSize.Store(int64(*cfg.MaxSize))
		} else if _, err := g.getDeployment(ctx); err != nil {
			errs = append(errs, fmt.Errorf("node group %s: %w", cfg.Name, err))
		}
		p.groups = append(p.groups, g)
		p.byName[cfg.Name] = g
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// NodeGroups implements nodegroups.Provider.
func (p *Provider) NodeGroups() []nodegroups.NodeGroup {
	out := make([]nodegroups.NodeGroup, len(p.groups))
	for i, g := range p.groups {
		out[i] = g
	}
	return out
}

// Group is the group of that name, or nil.
func (p *Provider) Group(name string) *Group { return p.byName[name] }

// Refresh brings the labels of every group's machines and nodes up to
// date: it runs Sync. It is what the provisioner calls before it looks for
// an attempt's nodes by nodegroups.LabelAttempt, since Cluster API creates
// them after IncreaseSize returns and does not label them.
func (p *Provider) Refresh(ctx context.Context) error { return p.Sync(ctx) }

// Sync runs Group.Sync on every group.
func (p *Provider) Sync(ctx context.Context) error {
	var errs []error
	for _, g := range p.groups {
		errs = append(errs, g.Sync(ctx))
	}
	return errors.Join(errs...)
}

// NodeGroupForNode implements nodegroups.Provider. A node annotated with
// its Machine (AnnotationMachine, which Cluster API sets) belongs to the
// group of the Machine's MachineDeployment, and to none if the Machine is
// gone, belongs to another MachineDeployment or points at another node. The
// Machine is looked up among those the groups last listed, else read from
// the API. Only a node without that annotation, or whose Machine cannot be
// read, is placed by its nodegroups.LabelNodeGroup label.
func (p *Provider) NodeGroupForNode(n *v1.Node) (nodegroups.NodeGroup, bool) {
	if machine := n.Annotations[AnnotationMachine]; machine != "" {
		if g, decided := p.groupOfMachine(n, machine); decided {
			if g == nil {
				return nil, false
			}
			return g, true
		}
	}
	if g := p.byName[n.Labels[nodegroups.LabelNodeGroup]]; g != nil {
		return g, true
	}
	return nil, false
}

// groupOfMachine is the group of node n's machine; decided is false when
// the machine could not be read.
func (p *Provider) groupOfMachine(n *v1.Node, machine string) (g *Group, decided bool) {
	var namespaces []string
	if ns := n.Annotations[AnnotationClusterNamespace]; ns != "" {
		namespaces = []string{ns}
	} else {
		for _, g := range p.groups {
			if !slices.Contains(namespaces, g.cfg.Namespace) {
				namespaces = append(namespaces, g.cfg.Namespace)
			}
		}
	}
	for _, ns := range namespaces {
		for _, g := range p.groups {
			if g.cfg.Namespace == ns && g.knownMachineNode(machine) == n.Name {
				return g, true
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	decided = true
	for _, ns := range namespaces {
		obj, err := p.dyn.Resource(MachineResource).Namespace(ns).Get(ctx, machine, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			decided = false
			continue
		}
		m := newMachine(obj)
		if m.nodeName != "" && m.nodeName != n.Name {
			return nil, true
		}
		md := obj.GetLabels()[LabelDeploymentName]
		for _, g := range p.groups {
			if g.cfg.Namespace == ns && g.cfg.MachineDeployment == md {
				return g, true
			}
		}
		return nil, true
	}
	return nil, decided
}
