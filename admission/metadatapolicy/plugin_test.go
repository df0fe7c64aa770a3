package metadatapolicy

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/admission"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// The in-process plugin's validating phase rejects a tenant's
// MetadataPolicy that targets its own Namespace, naming the field.
func TestValidateRejectsClusterScopedTargets(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": policyv1alpha1.SchemeGroupVersion.String(), "kind": "MetadataPolicy",
		"metadata": map[string]any{"name": "escalate", "namespace": "team-a"},
		"spec": map[string]any{
			"targets": map[string]any{"resources": []any{map[string]any{"group": "", "resource": "namespaces"}}},
			"rules":   []any{map[string]any{"policyAction": map[string]any{"updatedLabels": map[string]any{"role": "monitoring"}}}},
		},
	}}
	a := admission.NewAttributesRecord(u, nil, policyv1alpha1.SchemeGroupVersion.WithKind("MetadataPolicy"), "team-a", "escalate",
		MetadataPoliciesResource, "", admission.Create, &metav1.CreateOptions{}, false, nil)
	err := (&Plugin{}).Validate(context.Background(), a, nil)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.targets.resources[0]") {
		t.Errorf("Validate = %v, want Invalid naming spec.targets.resources[0]", err)
	}
}
