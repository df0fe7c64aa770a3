//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/crds/crdtest"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// TestParametersImmutable: no key of spec.parameters can be added, changed
// or removed once the request exists, whether parameters were given at
// creation or not, through either served version. The controller reads
// every one of them (processorInstance decides which instance serves the
// request; validUntilSeconds and noRetry how long it is retried), so a
// change after creation would let a tenant move a request away from the
// instance that holds its booking or stretch an attempt.
func TestParametersImmutable(t *testing.T) {
	_, cfg := crdtest.Start(t)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const (
		immutable   = "spec.parameters: Invalid value: Value is immutable"
		addedRemove = "spec.parameters: Invalid value: parameters cannot be added or removed after creation"
	)
	keys := []struct{ key, value, other string }{
		{provv1.ParameterValidUntilSeconds, "600", "1200"},
		{provv1.ParameterNoRetry, "true", "false"},
		{"processorInstance", "instance-a", "instance-b"},
		{"example.com/unknown", "x", "y"},
	}
	for _, res := range []schema.GroupVersionResource{v1Resource, v1beta1Resource} {
		requests := dyn.Resource(res).Namespace("default")
		for i, k := range keys {
			for _, tc := range []struct {
				name          string
				before, after map[string]any // nil: no parameters at all
				wantErr       string
			}{
				{name: "added to a request created without parameters", after: map[string]any{k.key: k.value}, wantErr: addedRemove},
				{name: "added beside another parameter", before: map[string]any{"other": "1"}, after: map[string]any{"other": "1", k.key: k.value}, wantErr: immutable},
				{name: "changed", before: map[string]any{k.key: k.value}, after: map[string]any{k.key: k.other}, wantErr: immutable},
				{name: "removed, another kept", before: map[string]any{"other": "1", k.key: k.value}, after: map[string]any{"other": "1"}, wantErr: immutable},
				{name: "removed with all parameters", before: map[string]any{k.key: k.value}, wantErr: addedRemove},
				{name: "kept while labels change", before: map[string]any{k.key: k.value}, after: map[string]any{k.key: k.value}},
			} {
				t.Run(fmt.Sprintf("%s/%s/%s", res.Version, k.key, tc.name), func(t *testing.T) {
					name := fmt.Sprintf("p-%s-%d-%s", res.Version, i, strings.ReplaceAll(tc.name, " ", "-"))
					name = strings.NewReplacer(",", "").Replace(name)
					created, err := requests.Create(ctx, parameterRequest(res, name, tc.before), metav1.CreateOptions{})
					if err != nil {
						t.Fatalf("create rejected: %v", err)
					}
					edited := created.DeepCopy()
					edited.SetLabels(map[string]string{"edited": "true"})
					if tc.after == nil {
						unstructured.RemoveNestedField(edited.Object, "spec", "parameters")
					} else if err := unstructured.SetNestedMap(edited.Object, tc.after, "spec", "parameters"); err != nil {
						t.Fatal(err)
					}
					_, err = requests.Update(ctx, edited, metav1.UpdateOptions{})
					crdtest.CheckErr(t, "update", err, tc.wantErr)
					if tc.wantErr == "" {
						return
					}
					// Nothing of the refused update was stored.
					got, err := requests.Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					params, _, _ := unstructured.NestedMap(got.Object, "spec", "parameters")
					if fmt.Sprint(params) != fmt.Sprint(tc.before) && !(len(params) == 0 && tc.before == nil) {
						t.Errorf("stored parameters %v after a refused update, want %v", params, tc.before)
					}
				})
			}
		}
	}
}

// parameterRequest is a check-capacity request of version res with the
// given parameters (none when params is nil).
func parameterRequest(res schema.GroupVersionResource, name string, params map[string]any) *unstructured.Unstructured {
	spec := map[string]any{
		"provisioningClassName": provv1.ClassCheckCapacity,
		"podSets":               []any{map[string]any{"podTemplateRef": map[string]any{"name": "workers"}, "count": int64(4)}},
	}
	if params != nil {
		spec["parameters"] = params
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": res.GroupVersion().String(),
		"kind":       "ProvisioningRequest",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       spec,
	}}
}
