package wrappers

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodTemplateWrapper wraps a PodTemplate.
type PodTemplateWrapper struct{ v1.PodTemplate }

// MakePodTemplate returns a template of pods like MakePod's: one pause
// container without requests.
func MakePodTemplate(name, namespace string) *PodTemplateWrapper {
	return &PodTemplateWrapper{v1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Template:   v1.PodTemplateSpec{Spec: podSpec()},
	}}
}

// Obj returns the template.
func (t *PodTemplateWrapper) Obj() *v1.PodTemplate { return &t.PodTemplate }

// Requests sets the requests of the container, as name, quantity pairs.
func (t *PodTemplateWrapper) Requests(nameValues ...string) *PodTemplateWrapper {
	t.Template.Spec.Containers[0].Resources.Requests = ResourceList(nameValues...)
	return t
}

// NodeSelector adds a node selector label.
func (t *PodTemplateWrapper) NodeSelector(key, value string) *PodTemplateWrapper {
	if t.Template.Spec.NodeSelector == nil {
		t.Template.Spec.NodeSelector = map[string]string{}
	}
	t.Template.Spec.NodeSelector[key] = value
	return t
}

// Toleration adds an Exists toleration of key.
func (t *PodTemplateWrapper) Toleration(key string) *PodTemplateWrapper {
	t.Template.Spec.Tolerations = append(t.Template.Spec.Tolerations, existsToleration(key))
	return t
}

// PriorityClass sets the template's spec.priorityClassName.
func (t *PodTemplateWrapper) PriorityClass(name string) *PodTemplateWrapper {
	t.Template.Spec.PriorityClassName = name
	return t
}

// Priority sets the template's raw spec.priority, which no admission
// plugin checks on a PodTemplate.
func (t *PodTemplateWrapper) Priority(p int32) *PodTemplateWrapper {
	t.Template.Spec.Priority = &p
	return t
}
