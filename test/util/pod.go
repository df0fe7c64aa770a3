package util

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// WaitForPod waits until the pod ns/name exists and cond holds for it,
// and returns the last pod read. what says what cond checks, for the
// error ("scheduled").
func WaitForPod(ctx context.Context, timeout time.Duration, c kubernetes.Interface, ns, name, what string, cond func(*v1.Pod) bool) (*v1.Pod, error) {
	return WaitFor(ctx, timeout, fmt.Sprintf("pod %s/%s %s", ns, name, what),
		func(ctx context.Context) (*v1.Pod, error) {
			return c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		}, cond, DescribePod)
}

// PodScheduled holds for a pod bound to a node.
func PodScheduled(p *v1.Pod) bool { return p.Spec.NodeName != "" }

// Unschedulable holds for a pod that is not bound and whose PodScheduled
// condition says the scheduler found no node for it, with a message
// containing every string of want.
func Unschedulable(p *v1.Pod, want ...string) bool {
	c := PodCondition(p, v1.PodScheduled)
	if p.Spec.NodeName != "" || c == nil || c.Status != v1.ConditionFalse || c.Reason != v1.PodReasonUnschedulable {
		return false
	}
	for _, w := range want {
		if !strings.Contains(c.Message, w) {
			return false
		}
	}
	return true
}

// PodCondition returns the pod's condition of type typ, nil when it has none.
func PodCondition(p *v1.Pod, typ v1.PodConditionType) *v1.PodCondition {
	_, c := podutil.GetPodCondition(&p.Status, typ)
	return c
}

// DescribePod is a pod's state in one line: phase, node, nomination,
// scheduling gates and conditions that are not True.
func DescribePod(p *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s phase %s, node %q", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName)
	if p.Status.NominatedNodeName != "" {
		fmt.Fprintf(&b, ", nominated to %q", p.Status.NominatedNodeName)
	}
	if p.DeletionTimestamp != nil {
		b.WriteString(", being deleted")
	}
	for _, g := range p.Spec.SchedulingGates {
		fmt.Fprintf(&b, ", gated by %s", g.Name)
	}
	for _, c := range p.Status.Conditions {
		if c.Status != v1.ConditionTrue {
			fmt.Fprintf(&b, ", %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return b.String()
}
