// Package wrappers builds the API objects Gantry's integration and e2e tests
// use, kueue-style: MakePod("p", "ns").Gated("q").RequiredTerms(...).Obj().
package wrappers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodWrapper wraps a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod returns a pod with one pause container.
func MakePod(name, namespace string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "work", Image: "registry.k8s.io/pause:3.10"}},
		},
	}}
}

// Obj returns the pod.
func (p *PodWrapper) Obj() *corev1.Pod { return &p.Pod }

// Label sets a label.
func (p *PodWrapper) Label(k, v string) *PodWrapper {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
	return p
}

// Annotation sets an annotation.
func (p *PodWrapper) Annotation(k, v string) *PodWrapper {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[k] = v
	return p
}

// Gated adds a scheduling gate.
func (p *PodWrapper) Gated(gate string) *PodWrapper {
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: gate})
	return p
}

// Toleration adds an Exists toleration of key.
func (p *PodWrapper) Toleration(key string) *PodWrapper {
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	return p
}

// NodeSelector adds a node selector label.
func (p *PodWrapper) NodeSelector(key, value string) *PodWrapper {
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[key] = value
	return p
}

// RequiredTerms sets the required node affinity to the OR of terms.
func (p *PodWrapper) RequiredTerms(terms ...corev1.NodeSelectorTerm) *PodWrapper {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: terms}
	return p
}

// SetRequiredTerms replaces the required node affinity terms of p, which
// must have a required node affinity.
func SetRequiredTerms(p *corev1.Pod, terms ...corev1.NodeSelectorTerm) {
	p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
}

// Term is a nodeSelectorTerm of label requirements.
func Term(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: reqs}
}

// Req is a label requirement.
func Req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

// In is a label In requirement.
func In(key string, values ...string) corev1.NodeSelectorRequirement {
	return Req(key, corev1.NodeSelectorOpIn, values...)
}

// Requests sets the requests of the pod's container, e.g.
// Requests("cpu", "500m", "memory", "1Gi").
func (p *PodWrapper) Requests(nameValues ...string) *PodWrapper {
	p.Spec.Containers[0].Resources.Requests = ResourceList(nameValues...)
	return p
}

// OnNode sets a required node affinity to the node of that hostname (the
// scheduler still decides whether the pod fits there, unlike spec.nodeName).
func (p *PodWrapper) OnNode(node string) *PodWrapper {
	return p.RequiredTerms(Term(In(corev1.LabelHostname, node)))
}

// PriorityClass sets the pod's priorityClassName; admission fills in its
// priority and preemptionPolicy from the class.
func (p *PodWrapper) PriorityClass(name string) *PodWrapper {
	p.Spec.PriorityClassName = name
	return p
}

// NoGrace makes the pod go away at once when deleted.
func (p *PodWrapper) NoGrace() *PodWrapper {
	var zero int64
	p.Spec.TerminationGracePeriodSeconds = &zero
	return p
}

// ResourceList parses name, quantity pairs.
func ResourceList(nameValues ...string) corev1.ResourceList {
	if len(nameValues)%2 != 0 {
		panic("ResourceList takes name, quantity pairs")
	}
	l := corev1.ResourceList{}
	for i := 0; i < len(nameValues); i += 2 {
		l[corev1.ResourceName(nameValues[i])] = resource.MustParse(nameValues[i+1])
	}
	return l
}
