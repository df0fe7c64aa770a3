package capitest

import (
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// CRDs are minimal MachineDeployment, MachineSet and Machine CustomResourceDefinitions
// (cluster.x-k8s.io/v1beta1), written for tests rather than taken from
// Cluster API: spec.replicas and status.replicas are typed, everything
// else is preserved as written. MachineDeployment has the status and scale
// subresources, Machine the status subresource (status.nodeRef is written
// through it). An integration test installs them with the control plane's
// InstallCRDs (test/integration/framework).
func CRDs() []*apiextensionsv1.CustomResourceDefinition {
	return []*apiextensionsv1.CustomResourceDefinition{
		crd("MachineDeployment", machineDeploymentResource, &apiextensionsv1.CustomResourceSubresources{
			Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
			Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"},
		}),
		crd("Machine", machineResource, &apiextensionsv1.CustomResourceSubresources{
			Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
		}),
		crd("MachineSet", machineSetResource, nil),
	}
}

func crd(kind string, gvr schema.GroupVersionResource, subresources *apiextensionsv1.CustomResourceSubresources) *apiextensionsv1.CustomResourceDefinition {
	preserved := func(properties map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true), Properties: properties}
	}
	replicas := map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer", Format: "int32"}}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: gvr.Resource + "." + gvr.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvr.Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: gvr.Resource, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List",
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: gvr.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec":   preserved(replicas),
						"status": preserved(replicas),
					},
				}},
				Subresources: subresources,
			}},
		},
	}
}
