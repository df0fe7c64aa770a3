package wrappers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// MetadataPolicyWrapper wraps a MetadataPolicy.
type MetadataPolicyWrapper struct{ policyv1alpha1.MetadataPolicy }

// MakeMetadataPolicy returns a policy without rules. Its TypeMeta is set,
// so that it converts to unstructured for a dynamic client.
func MakeMetadataPolicy(name, namespace string) *MetadataPolicyWrapper {
	return &MetadataPolicyWrapper{policyv1alpha1.MetadataPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1alpha1.SchemeGroupVersion.String(), Kind: "MetadataPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}}
}

// Obj returns the policy.
func (p *MetadataPolicyWrapper) Obj() *policyv1alpha1.MetadataPolicy { return &p.MetadataPolicy }

// Rule adds a rule: when pred matches, act.
func (p *MetadataPolicyWrapper) Rule(pred policyv1alpha1.PolicyPredicate, act policyv1alpha1.PolicyAction) *MetadataPolicyWrapper {
	p.Spec.Rules = append(p.Spec.Rules, policyv1alpha1.MetadataPolicyRule{PolicyPredicate: pred, PolicyAction: act})
	return p
}

// Enforcement sets Enforce or Audit.
func (p *MetadataPolicyWrapper) Enforcement(mode policyv1alpha1.EnforcementMode) *MetadataPolicyWrapper {
	p.Spec.Enforcement = mode
	return p
}

// ClusterMetadataPolicyWrapper wraps a ClusterMetadataPolicy.
type ClusterMetadataPolicyWrapper struct {
	policyv1alpha1.ClusterMetadataPolicy
}

// MakeClusterMetadataPolicy returns a policy of every namespace, without
// rules. Its TypeMeta is set, as MakeMetadataPolicy's.
func MakeClusterMetadataPolicy(name string) *ClusterMetadataPolicyWrapper {
	return &ClusterMetadataPolicyWrapper{policyv1alpha1.ClusterMetadataPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1alpha1.SchemeGroupVersion.String(), Kind: "ClusterMetadataPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}}
}

// Obj returns the policy.
func (p *ClusterMetadataPolicyWrapper) Obj() *policyv1alpha1.ClusterMetadataPolicy {
	return &p.ClusterMetadataPolicy
}

// Rule adds a rule: when pred matches, act.
func (p *ClusterMetadataPolicyWrapper) Rule(pred policyv1alpha1.PolicyPredicate, act policyv1alpha1.PolicyAction) *ClusterMetadataPolicyWrapper {
	p.Spec.Rules = append(p.Spec.Rules, policyv1alpha1.MetadataPolicyRule{PolicyPredicate: pred, PolicyAction: act})
	return p
}

// NamespaceSelector selects the namespaces the policy applies in.
func (p *ClusterMetadataPolicyWrapper) NamespaceSelector(sel *metav1.LabelSelector) *ClusterMetadataPolicyWrapper {
	p.Spec.NamespaceSelector = sel
	return p
}
