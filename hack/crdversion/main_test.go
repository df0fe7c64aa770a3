package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// widget is a CRD as controller-gen writes it.
const widget = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.21.0
  name: widgets.example.gantry.dev
spec:
  group: example.gantry.dev
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  scope: Namespaced
  versions:
  - additionalPrinterColumns:
    - jsonPath: .metadata.creationTimestamp
      name: Age
      type: date
    name: v1
    schema:
      openAPIV3Schema:
        properties:
          spec:
            properties:
              size:
                format: int32
                minimum: 1
                type: integer
                x-kubernetes-validations:
                - message: Value is immutable
                  rule: self == oldSelf
            type: object
        type: object
    served: true
    storage: true
    subresources:
      status: {}
`

func TestAddDeprecatedVersion(t *testing.T) {
	out, err := addDeprecatedVersion([]byte(widget), "v1", "v1beta1", "v1beta1 is deprecated; use v1")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(out, &crd); err != nil {
		t.Fatalf("the output is not a CRD: %v\n%s", err, out)
	}
	if len(crd.Spec.Versions) != 2 {
		t.Fatalf("versions %+v, want v1 and v1beta1", crd.Spec.Versions)
	}
	v1, beta := crd.Spec.Versions[0], crd.Spec.Versions[1]
	if v1.Name != "v1" || !v1.Served || !v1.Storage || v1.Deprecated {
		t.Errorf("v1 changed: %+v", v1)
	}
	warning := "v1beta1 is deprecated; use v1"
	want := v1.DeepCopy()
	want.Name, want.Storage, want.Deprecated, want.DeprecationWarning = "v1beta1", false, true, &warning
	if diff := cmp.Diff(want, &beta); diff != "" {
		t.Errorf("v1beta1 is not v1's copy, served, not stored, deprecated (-want +got):\n%s", diff)
	}
	// Only the version is added: the rest of the file is byte for byte
	// what came in.
	if !strings.HasPrefix(string(out), widget) {
		t.Errorf("the input changed:\n%s", out)
	}
}

func TestAddDeprecatedVersionErrors(t *testing.T) {
	twice, err := addDeprecatedVersion([]byte(widget), "v1", "v1beta1", "deprecated")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data, from, version, wantErr string
	}{
		{name: "no source version", data: widget, from: "v2", version: "v1beta1", wantErr: "has no version v2"},
		{name: "version exists", data: string(twice), from: "v1", version: "v1beta1", wantErr: "already has version v1beta1"},
		{name: "copy of itself", data: widget, from: "v1", version: "v1", wantErr: "cannot be added as a copy of itself"},
		{name: "not a CRD", data: "---\napiVersion: v1\nkind: ConfigMap\n", from: "v1", version: "v1beta1",
			wantErr: "want a CustomResourceDefinition"},
		{name: "no versions", data: "---\nkind: CustomResourceDefinition\nmetadata: {name: x}\nspec: {}\n", from: "v1",
			version: "v1beta1", wantErr: "CRD x has no spec.versions"},
		{name: "no document start", data: strings.TrimPrefix(widget, docStart), from: "v1", version: "v1beta1",
			wantErr: "does not start with ---"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := addDeprecatedVersion([]byte(tc.data), tc.from, tc.version, "deprecated")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestRoundTrip: decoding and encoding every generated CRD gives the file
// back unchanged, so the rewrite adds a version and changes nothing else of
// what controller-gen wrote.
func TestRoundTrip(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "crds", "manifests", "*_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no CRDs in crds/manifests")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd, err := decode(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out, err := encode(crd)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !bytes.Equal(data, out) {
			t.Errorf("%s changes when decoded and encoded again:\n%s", f, cmp.Diff(string(data), string(out)))
		}
	}
}
