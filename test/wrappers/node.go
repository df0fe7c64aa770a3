package wrappers

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeWrapper wraps a Node.
type NodeWrapper struct{ v1.Node }

// MakeNode returns a node without labels, capacity or taints.
func MakeNode(name string) *NodeWrapper {
	return &NodeWrapper{v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Obj returns the node.
func (n *NodeWrapper) Obj() *v1.Node { return &n.Node }

// Label sets a label.
func (n *NodeWrapper) Label(k, v string) *NodeWrapper {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[k] = v
	return n
}

// Capacity sets the node's capacity and allocatable to the name, quantity
// pairs, e.g. Capacity("cpu", "4", "memory", "16Gi", "pods", "110").
func (n *NodeWrapper) Capacity(nameValues ...string) *NodeWrapper {
	n.Status.Capacity = ResourceList(nameValues...)
	n.Status.Allocatable = ResourceList(nameValues...)
	return n
}

// Taint adds a taint.
func (n *NodeWrapper) Taint(key, value string, effect v1.TaintEffect) *NodeWrapper {
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Value: value, Effect: effect})
	return n
}

// Unschedulable cordons the node.
func (n *NodeWrapper) Unschedulable() *NodeWrapper {
	n.Spec.Unschedulable = true
	return n
}
