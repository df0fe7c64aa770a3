package kueue

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Queue describes what a namespace's Jobs need to be admitted through a
// ProvisioningRequest admission check: a ResourceFlavor, a
// ProvisioningRequestConfig, an AdmissionCheck and a ClusterQueue (that
// check, the namespace's Jobs, and CPU and Memory of that flavor), all
// named Name, and the LocalQueue LocalQueue in Namespace.
type Queue struct {
	Name, Namespace, LocalQueue string
	// Class is the ProvisioningClass of the requests.
	Class string
	// CPU and Memory are the ClusterQueue's nominal quotas.
	CPU, Memory string
	// Parameters, RetryStrategy and PodSetUpdates go into the
	// ProvisioningRequestConfig's spec, Preemption into the ClusterQueue's;
	// nil: Kueue's defaults.
	Parameters, RetryStrategy, PodSetUpdates, Preemption map[string]any
	// Topology names the Topology of the ResourceFlavor, which then covers
	// the nodes of NodeLabels (Kueue's topology-aware scheduling).
	Topology   string
	NodeLabels map[string]string
}

// Object is an object of Kueue's API and its resource.
type Object struct {
	Resource schema.GroupVersionResource
	*unstructured.Unstructured
}

// Objects are q's objects, in the order they are to be created (each names
// only those before it); deleted in the reverse order.
func (q Queue) Objects() []Object {
	flavor := map[string]any{"kind": "ResourceFlavor", "metadata": map[string]any{"name": q.Name}}
	if q.Topology != "" {
		labels := map[string]any{}
		for k, v := range q.NodeLabels {
			labels[k] = v
		}
		flavor["spec"] = map[string]any{"topologyName": q.Topology, "nodeLabels": labels}
	}
	config := map[string]any{"provisioningClassName": q.Class, "managedResources": []any{"cpu"}}
	for key, v := range map[string]map[string]any{"parameters": q.Parameters, "retryStrategy": q.RetryStrategy, "podSetUpdates": q.PodSetUpdates} {
		if v != nil {
			config[key] = v
		}
	}
	cq := map[string]any{
		"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": q.Namespace}},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu", "memory"},
			"flavors": []any{map[string]any{"name": q.Name, "resources": []any{
				map[string]any{"name": "cpu", "nominalQuota": q.CPU},
				map[string]any{"name": "memory", "nominalQuota": q.Memory},
			}}},
		}},
		"admissionChecksStrategy": map[string]any{"admissionChecks": []any{map[string]any{"name": q.Name}}},
	}
	if q.Preemption != nil {
		cq["preemption"] = q.Preemption
	}
	named := func(kind string) map[string]any {
		return map[string]any{"kind": kind, "metadata": map[string]any{"name": q.Name}}
	}
	objs := []Object{
		{ResourceFlavors, &unstructured.Unstructured{Object: flavor}},
		{ProvisioningRequestConfigs, &unstructured.Unstructured{Object: withSpec(named("ProvisioningRequestConfig"), config)}},
		{AdmissionChecks, &unstructured.Unstructured{Object: withSpec(named("AdmissionCheck"), map[string]any{
			"controllerName": ProvisioningController,
			"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": q.Name},
		})}},
		{ClusterQueues, &unstructured.Unstructured{Object: withSpec(named("ClusterQueue"), cq)}},
		{LocalQueues, &unstructured.Unstructured{Object: map[string]any{"kind": "LocalQueue",
			"metadata": map[string]any{"name": q.LocalQueue, "namespace": q.Namespace},
			"spec":     map[string]any{"clusterQueue": q.Name}}}},
	}
	for _, o := range objs {
		o.SetAPIVersion(Resource("").GroupVersion().String())
	}
	return objs
}

func withSpec(obj, spec map[string]any) map[string]any {
	obj["spec"] = spec
	return obj
}

// ConditionStatus is the status of obj's condition typ ("True", "False",
// "Unknown"), or "" when it has none: Kueue's objects are read through
// the dynamic client.
func ConditionStatus(obj *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}
