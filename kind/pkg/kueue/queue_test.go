package kueue

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestQueueObjects(t *testing.T) {
	q := Queue{Name: "cq", Namespace: "ns", LocalQueue: "lq", Class: "check-capacity.autoscaling.x-k8s.io", CPU: "2", Memory: "1Ti"}
	objs := q.Objects()
	want := []struct{ kind, resource, name, namespace string }{
		{"ResourceFlavor", "resourceflavors", "cq", ""},
		{"ProvisioningRequestConfig", "provisioningrequestconfigs", "cq", ""},
		{"AdmissionCheck", "admissionchecks", "cq", ""},
		{"ClusterQueue", "clusterqueues", "cq", ""},
		{"LocalQueue", "localqueues", "lq", "ns"},
	}
	if len(objs) != len(want) {
		t.Fatalf("%d objects, want %d", len(objs), len(want))
	}
	for i, w := range want {
		o := objs[i]
		if o.GetKind() != w.kind || o.Resource.Resource != w.resource || o.GetName() != w.name || o.GetNamespace() != w.namespace {
			t.Errorf("object %d: %s %s/%s of %s, want %s %s/%s of %s", i, o.GetKind(), o.GetNamespace(), o.GetName(), o.Resource.Resource, w.kind, w.namespace, w.name, w.resource)
		}
		if o.GetAPIVersion() != "kueue.x-k8s.io/"+APIVersion {
			t.Errorf("%s: apiVersion %q", o.GetKind(), o.GetAPIVersion())
		}
	}
	str := func(o Object, path ...string) string {
		s, _, _ := unstructured.NestedString(o.Object, path...)
		return s
	}
	if got := str(objs[1], "spec", "provisioningClassName"); got != q.Class {
		t.Errorf("ProvisioningRequestConfig class %q, want %q", got, q.Class)
	}
	if got := str(objs[2], "spec", "parameters", "name"); got != "cq" {
		t.Errorf("AdmissionCheck names config %q, want cq", got)
	}
	if got := str(objs[3], "spec", "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name"); got != "ns" {
		t.Errorf("ClusterQueue selects namespace %q, want ns", got)
	}
	checks, _, _ := unstructured.NestedSlice(objs[3].Object, "spec", "admissionChecksStrategy", "admissionChecks")
	if len(checks) != 1 || checks[0].(map[string]any)["name"] != "cq" {
		t.Errorf("ClusterQueue admission checks %v, want cq", checks)
	}
	if got := str(objs[4], "spec", "clusterQueue"); got != "cq" {
		t.Errorf("LocalQueue's ClusterQueue %q, want cq", got)
	}
	for _, field := range []string{"parameters", "retryStrategy", "podSetUpdates"} {
		if _, ok, _ := unstructured.NestedFieldNoCopy(objs[1].Object, "spec", field); ok {
			t.Errorf("ProvisioningRequestConfig has %s though none was given", field)
		}
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(objs[3].Object, "spec", "preemption"); ok {
		t.Error("ClusterQueue has preemption though none was given")
	}

	q.Parameters = map[string]any{"ValidUntilSeconds": "180"}
	q.Preemption = map[string]any{"withinClusterQueue": "LowerPriority"}
	q.Topology, q.NodeLabels = "topo", map[string]string{"pool": "a"}
	objs = q.Objects()
	if got := str(objs[1], "spec", "parameters", "ValidUntilSeconds"); got != "180" {
		t.Errorf("ProvisioningRequestConfig parameter ValidUntilSeconds %q, want 180", got)
	}
	if got := str(objs[3], "spec", "preemption", "withinClusterQueue"); got != "LowerPriority" {
		t.Errorf("ClusterQueue preemption %q, want LowerPriority", got)
	}
	if got, want := str(objs[0], "spec", "topologyName")+" "+str(objs[0], "spec", "nodeLabels", "pool"), "topo a"; got != want {
		t.Errorf("ResourceFlavor topology and node label %q, want %q", got, want)
	}
}

func TestConditionStatus(t *testing.T) {
	cq := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Active", "status": "True"},
		map[string]any{"type": "Terminating", "status": "False"},
	}}}}
	for typ, want := range map[string]string{"Active": "True", "Terminating": "False", "Missing": ""} {
		if got := ConditionStatus(cq, typ); got != want {
			t.Errorf("ConditionStatus(%s) = %q, want %q", typ, got, want)
		}
	}
	if got := ConditionStatus(&unstructured.Unstructured{Object: map[string]any{}}, "Active"); got != "" {
		t.Errorf("an object without status: %q, want \"\"", got)
	}
}
