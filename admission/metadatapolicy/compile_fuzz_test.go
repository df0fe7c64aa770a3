package metadatapolicy

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// maxCompileErrorBytes bounds the error text of one rejected policy,
// whatever its size (see Compile).
const maxCompileErrorBytes = (maxCompileErrors+1)*(maxCompileErrorItemBytes+64) + 256

// FuzzCompile feeds arbitrary JSON as a policy's spec to the parser,
// validator and compiler that admission runs on every policy write (and the
// stand-in of an invalid policy): no input may panic, and the error text
// stays bounded whatever the input's size.
func FuzzCompile(f *testing.F) {
	f.Add([]byte(`{"rules":[{"policyPredicate":{"labelSelector":{"matchLabels":{"a":"b"}}},"policyAction":{"updatedLabels":{"x":"y"}}}]}`), false)
	f.Add([]byte(`{"targets":{"resources":[{"resource":"pods/status"},{"resource":"namespaces"}],"operations":["DELETE"]},"rules":[{"policyAction":{"reject":true}}]}`), false)
	f.Add([]byte(`{"namespaceSelector":{"matchExpressions":[{"key":"k","operator":"Bogus"}]},"rules":[{"policyAction":{"reject":true,"updatedLabels":{"-":"--"}}}]}`), true)
	f.Add([]byte(`{"enforcement":"Sometimes","rules":[{"policyPredicate":{"annotationSelector":{"matchExpressions":[{"key":"a","operator":"In"}]}},"policyAction":{"schedulerName":"Not A Name"}}]}`), true)
	f.Add([]byte(`{"rules":"not a list"}`), false)
	f.Fuzz(func(t *testing.T, spec []byte, cluster bool) {
		var m map[string]any
		if json.Unmarshal(spec, &m) != nil {
			return
		}
		kind, ns := "MetadataPolicy", "team-a"
		if cluster {
			kind, ns = "ClusterMetadataPolicy", ""
		}
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policy.gantry.dev/v1alpha1", "kind": kind, "spec": m}}
		u.SetName("p")
		u.SetNamespace(ns)
		p, errs := Compile(u)
		if (p == nil) == (errs == nil) {
			t.Fatalf("Compile returned policy %v and errors %v", p, errs)
		}
		if errs == nil {
			return
		}
		text := errs.ToAggregate().Error()
		if len(text) > maxCompileErrorBytes {
			t.Fatalf("%d bytes of error text for %d bytes of spec (bound %d)", len(text), len(spec), maxCompileErrorBytes)
		}
		if fb := Fallback(u, text); fb != nil && fb.Invalid() == "" {
			t.Fatal("the stand-in of an invalid policy does not say why")
		}
	})
}
