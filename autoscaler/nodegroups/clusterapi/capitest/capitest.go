// Package capitest stands in for Cluster API in tests of the Cluster API
// node-group provider (package clusterapi): MachineController plays the
// MachineSet controller and an infrastructure provider, CRDs gives a real
// kube-apiserver minimal MachineDeployment, MachineSet and Machine resources, and
// NewFakeDynamicClient is a fake dynamic client that lists them. The
// provider's unit tests (fake clients) and its integration test (etcd and
// kube-apiserver from _output/bin) share it.
//
// It spells the few Cluster API names it needs itself instead of importing
// package clusterapi, whose in-package tests import this package: the test
// controller uses Cluster API's names as Cluster API spells them,
// independently of the provider's constants.
package capitest

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// Cluster API (cluster.x-k8s.io/v1beta1) names, as Cluster API defines
// them.
var (
	machineDeploymentResource = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machinedeployments"}
	machineResource           = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}
	machineSetResource        = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machinesets"}
)

const (
	// labelDeploymentName on a Machine names its MachineDeployment.
	labelDeploymentName = "cluster.x-k8s.io/deployment-name"
	// annotationDeleteMachine on a Machine makes the MachineSet controller
	// delete it first when it scales down.
	annotationDeleteMachine = "cluster.x-k8s.io/delete-machine"
	// annotationMachine and annotationClusterNamespace on a Node name its
	// Machine and the Machine's namespace.
	annotationMachine          = "cluster.x-k8s.io/machine"
	annotationClusterNamespace = "cluster.x-k8s.io/cluster-namespace"
)

// NewMachineDeployment is a MachineDeployment object with spec.replicas and
// annotations, for a fake client or to create.
func NewMachineDeployment(namespace, name string, replicas int64, annotations map[string]string) *unstructured.Unstructured {
	md := &unstructured.Unstructured{}
	md.SetAPIVersion(machineDeploymentResource.GroupVersion().String())
	md.SetKind("MachineDeployment")
	md.SetName(name)
	md.SetNamespace(namespace)
	md.SetAnnotations(annotations)
	_ = unstructured.SetNestedField(md.Object, replicas, "spec", "replicas")
	_ = unstructured.SetNestedField(md.Object, "test", "spec", "clusterName")
	return md
}

// NewMachineSet is a MachineSet object of MachineDeployment deployment
// (labelled cluster.x-k8s.io/deployment-name), for a fake client or to
// create.
func NewMachineSet(namespace, name, deployment string) *unstructured.Unstructured {
	ms := &unstructured.Unstructured{}
	ms.SetAPIVersion(machineSetResource.GroupVersion().String())
	ms.SetKind("MachineSet")
	ms.SetName(name)
	ms.SetNamespace(namespace)
	ms.SetUID(types.UID("uid-" + name))
	ms.SetLabels(map[string]string{labelDeploymentName: deployment})
	_ = unstructured.SetNestedField(ms.Object, "test", "spec", "clusterName")
	return ms
}

// NewFakeDynamicClient is a fake dynamic client holding objects that can
// list MachineDeployments, MachineSets and Machines.
func NewFakeDynamicClient(objects ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		machineDeploymentResource: "MachineDeploymentList",
		machineResource:           "MachineList",
		machineSetResource:        "MachineSetList",
	}, objects...)
}
