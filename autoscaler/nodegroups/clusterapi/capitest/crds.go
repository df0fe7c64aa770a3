package capitest

import (
	"context"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/kind/pkg/crds"
)

// CRDs are minimal MachineDeployment and Machine CustomResourceDefinitions
// (cluster.x-k8s.io/v1beta1), written for tests rather than taken from
// Cluster API: spec.replicas and status.replicas are typed, everything
// else is preserved as written. MachineDeployment has the status and scale
// subresources, Machine the status subresource (status.nodeRef is written
// through it).
func CRDs() []*apiextensionsv1.CustomResourceDefinition {
	return []*apiextensionsv1.CustomResourceDefinition{
		crd("MachineDeployment", machineDeploymentResource, &apiextensionsv1.CustomResourceSubresources{
			Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
			Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"},
		}),
		crd("Machine", machineResource, &apiextensionsv1.CustomResourceSubresources{
			Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
		}),
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

// InstallCRDs creates CRDs through cfg (one that exists already is left
// as it is) and waits, up to a minute each, until they are Established and
// their resources are served.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	list := CRDs()
	for _, c := range list {
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", c.Name, err)
		}
	}
	for _, c := range list {
		if err := crds.WaitEstablished(ctx, client, c.Name, time.Minute); err != nil {
			return err
		}
	}
	// Established, and then served.
	for _, gvr := range []schema.GroupVersionResource{machineDeploymentResource, machineResource} {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("%s not served within a minute: %w (last error: %v)", gvr.Resource, err, last)
		}
	}
	return nil
}
