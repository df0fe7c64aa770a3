package metadatapolicy

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

func TestSourceReadyWithoutThePolicyAPI(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}} // serves no groups
	s := NewSource(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), disc)
	if s.Ready() {
		t.Fatal("ready before the policy API was looked up: requests would be admitted unchecked")
	}
	runUntilReady(t, s, "not ready although the policy API is not installed: admission would wait on every request")
	if got := s.Policies("default"); len(got) != 0 {
		t.Errorf("policies without an API: %v", got)
	}
}

func TestSourceWaitsForInformersWhenTheAPIIsInstalled(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	disc.Resources = []*metav1.APIResourceList{{
		GroupVersion: policyv1alpha1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "metadatapolicies", Namespaced: true, Kind: "MetadataPolicy"}, {Name: "clustermetadatapolicies", Kind: "ClusterMetadataPolicy"}},
	}}
	s := NewSource(policyClient(true), disc)
	runUntilReady(t, s, "informers never synced")
	if s.absent.Load() {
		t.Error("the installed API was taken as absent")
	}
}

// policyClient is a fake dynamic client serving the policy resources, with
// the MetadataPolicy CRD object when crd is set.
func policyClient(crd bool) *dynamicfake.FakeDynamicClient {
	var objs []runtime.Object
	if crd {
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": PolicyCRDName},
		}})
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		MetadataPoliciesResource:        "MetadataPolicyList",
		ClusterMetadataPoliciesResource: "ClusterMetadataPolicyList",
		CRDResource:                     "CustomResourceDefinitionList",
	}, objs...)
}

// Finding 12: while discovery of policy.gantry.dev answers 404 (as it can
// for a moment at kube-apiserver start), the CRD object decides: the source
// stays not ready, so requests wait instead of being admitted unchecked.
func TestSourceNotReadyWhileDiscoveryLags(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}} // 404 for the policy group
	s := NewSource(policyClient(true), disc)
	// The fake's informers never sync without list reactors for a lagging
	// API: run one poll of Run's loop by hand.
	installed, err := s.apiInstalled(context.Background())
	if err != nil || !installed {
		t.Fatalf("apiInstalled = %v, %v with the CRD present and discovery answering 404: the plugin would admit everything", installed, err)
	}
	if s.Ready() {
		t.Error("ready before the informers synced")
	}
	// Once seen, the API is never taken as absent again.
	s.dynamic = policyClient(false)
	if installed, _ := s.apiInstalled(context.Background()); !installed {
		t.Error("the API flipped to absent after it was seen")
	}
}

// runUntilReady runs s until the test ends and waits until it is ready.
func runUntilReady(t *testing.T, s *Source, failure string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Run(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for !s.Ready() {
		if time.Now().After(deadline) {
			t.Fatal(failure)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
