package engine

import (
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// ClusterScopedResources are the well-known cluster-scoped resources (of
// Kubernetes and of Gantry). A namespaced MetadataPolicy may not target
// them: the policy is rejected when it is compiled. Namespaces are among
// them although kube-apiserver admits an update of Namespace X with
// namespace X: a tenant's policy must never write its own Namespace.
// Cluster-scoped resources not in this list (other CRDs) are caught at
// evaluation, where a namespaced policy never applies to an object without
// a namespace.
var ClusterScopedResources = map[policyv1alpha1.GroupResource]bool{
	{Group: "", Resource: "namespaces"}:                                                    true,
	{Group: "", Resource: "nodes"}:                                                         true,
	{Group: "", Resource: "persistentvolumes"}:                                             true,
	{Group: "", Resource: "componentstatuses"}:                                             true,
	{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}:                         true,
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}:                  true,
	{Group: "storage.k8s.io", Resource: "storageclasses"}:                                  true,
	{Group: "storage.k8s.io", Resource: "csidrivers"}:                                      true,
	{Group: "storage.k8s.io", Resource: "csinodes"}:                                        true,
	{Group: "storage.k8s.io", Resource: "volumeattachments"}:                               true,
	{Group: "storage.k8s.io", Resource: "volumeattributesclasses"}:                         true,
	{Group: "scheduling.k8s.io", Resource: "priorityclasses"}:                              true,
	{Group: "node.k8s.io", Resource: "runtimeclasses"}:                                     true,
	{Group: "networking.k8s.io", Resource: "ingressclasses"}:                               true,
	{Group: "networking.k8s.io", Resource: "ipaddresses"}:                                  true,
	{Group: "networking.k8s.io", Resource: "servicecidrs"}:                                 true,
	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}:                 true,
	{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}:                        true,
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}:                 true,
	{Group: "apiregistration.k8s.io", Resource: "apiservices"}:                             true,
	{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}:     true,
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}:   true,
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}:       true,
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"}: true,
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}:         true,
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicybindings"}:   true,
	{Group: "flowcontrol.apiserver.k8s.io", Resource: "flowschemas"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Resource: "prioritylevelconfigurations"}:       true,
	{Group: "resource.k8s.io", Resource: "deviceclasses"}:                                  true,
	{Group: "resource.k8s.io", Resource: "resourceslices"}:                                 true,
	{Group: "policy.gantry.dev", Resource: "clustermetadatapolicies"}:                      true,
	{Group: "scheduling.gantry.dev", Resource: "reservations"}:                             true,
	{Group: "autoscaling.gantry.dev", Resource: "provisioningclasses"}:                     true,
}

// clusterScoped reports whether obj is a cluster-scoped object: it has no
// namespace, or it is of a well-known cluster-scoped resource (a Namespace
// carries its own name as its admission namespace).
func (obj *Object) clusterScoped() bool {
	return obj.Namespace == "" || ClusterScopedResources[obj.Resource]
}
