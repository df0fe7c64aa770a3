package wrappers

import (
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// podTemplate is the template of pods like p, selected by its labels.
func podTemplate(p *v1.Pod) (*metav1.LabelSelector, v1.PodTemplateSpec) {
	return &metav1.LabelSelector{MatchLabels: p.Labels},
		v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels, Annotations: p.Annotations}, Spec: *p.Spec.DeepCopy()}
}

// ReplicaSetWrapper wraps a ReplicaSet.
type ReplicaSetWrapper struct{ appsv1.ReplicaSet }

// MakeReplicaSet returns a ReplicaSet of replicas pods like pod (its
// labels, which select them, annotations and spec; name and namespace are
// the ReplicaSet's).
func MakeReplicaSet(name, namespace string, replicas int32, pod *PodWrapper) *ReplicaSetWrapper {
	selector, template := podTemplate(pod.Obj())
	return &ReplicaSetWrapper{appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas), Selector: selector, Template: template},
	}}
}

// Obj returns the ReplicaSet.
func (r *ReplicaSetWrapper) Obj() *appsv1.ReplicaSet { return &r.ReplicaSet }

// DeploymentWrapper wraps a Deployment.
type DeploymentWrapper struct{ appsv1.Deployment }

// MakeDeployment returns a Deployment of replicas pods like pod, as
// MakeReplicaSet.
func MakeDeployment(name, namespace string, replicas int32, pod *PodWrapper) *DeploymentWrapper {
	selector, template := podTemplate(pod.Obj())
	return &DeploymentWrapper{appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: selector, Template: template},
	}}
}

// Obj returns the Deployment.
func (d *DeploymentWrapper) Obj() *appsv1.Deployment { return &d.Deployment }
