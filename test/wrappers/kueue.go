package wrappers

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// Kueue's shapes, for tests that act as Kueue's provisioning admission
// check does, without Kueue: the Workload its requests are owned by, the
// names it gives requests and PodTemplates, the label it puts on them,
// the gate it holds pods with and the parameters it copies from a
// ProvisioningRequestConfig.
const (
	// KueueGroupVersion is the Workload API version the fixtures use.
	KueueGroupVersion = "kueue.x-k8s.io/v1beta1"
	// KueueManagedLabel marks the requests and PodTemplates Kueue creates.
	KueueManagedLabel = "kueue.x-k8s.io/managed"
	// KueueAdmissionGate holds a pod group's pods until the workload is
	// admitted.
	KueueAdmissionGate = "kueue.x-k8s.io/admission"
	// KueuePodGroupLabel names a pod's pod group.
	KueuePodGroupLabel = "kueue.x-k8s.io/pod-group-name"
)

// KueueWorkloadCRD is a minimal CustomResourceDefinition of Kueue's
// Workload: its names, scope and version, with any content. Tests install
// it only where Kueue is not installed.
func KueueWorkloadCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "workloads.kueue.x-k8s.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "kueue.x-k8s.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "workloads", Singular: "workload", Kind: "Workload", ListKind: "WorkloadList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1beta1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
}

// MakeKueueWorkload returns a Workload owned by the pods of a pod group,
// as Kueue's pod integration makes one.
func MakeKueueWorkload(name, namespace string, pods ...*v1.Pod) *unstructured.Unstructured {
	w := &unstructured.Unstructured{}
	w.SetAPIVersion(KueueGroupVersion)
	w.SetKind("Workload")
	w.SetName(name)
	w.SetNamespace(namespace)
	var owners []metav1.OwnerReference
	for _, p := range pods {
		owners = append(owners, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID})
	}
	w.SetOwnerReferences(owners)
	return w
}

// KueueRequestName is the name Kueue gives the request of a workload's
// admission check, attempt counted from 1.
func KueueRequestName(workload, check string, attempt int) string {
	return fmt.Sprintf("%s-%s-%d", workload, check, attempt)
}

// KueuePodTemplateName is the name Kueue gives the PodTemplate of a pod
// set of a request.
func KueuePodTemplateName(request, podSet string) string {
	return fmt.Sprintf("ppt-%s-%s", request, podSet)
}

// OwnedByWorkload makes the request Kueue's: labelled managed, its
// controller the Workload w (created: it has a UID).
func (r *ProvisioningRequestWrapper) OwnedByWorkload(w *unstructured.Unstructured) *ProvisioningRequestWrapper {
	r.Labels = map[string]string{KueueManagedLabel: "true"}
	r.OwnerReferences = []metav1.OwnerReference{{APIVersion: w.GetAPIVersion(), Kind: w.GetKind(), Name: w.GetName(),
		UID: w.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	return r
}

// OwnedByWorkload makes the PodTemplate Kueue's, as it is before its
// request exists: labelled managed, its controller the Workload w.
func (t *PodTemplateWrapper) OwnedByWorkload(w *unstructured.Unstructured) *PodTemplateWrapper {
	t.Labels = map[string]string{KueueManagedLabel: "true"}
	t.OwnerReferences = []metav1.OwnerReference{{APIVersion: w.GetAPIVersion(), Kind: w.GetKind(), Name: w.GetName(),
		UID: w.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	return t
}
