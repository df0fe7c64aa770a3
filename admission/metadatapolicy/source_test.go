package metadatapolicy

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		MetadataPoliciesResource:        "MetadataPolicyList",
		ClusterMetadataPoliciesResource: "ClusterMetadataPolicyList",
	})
	s := NewSource(dyn, disc)
	runUntilReady(t, s, "informers never synced")
	if s.absent.Load() {
		t.Error("the installed API was taken as absent")
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
