package app

import (
	"context"
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// scriptedDiscovery fails its first calls (an API server not up yet), then
// serves what FakeDiscovery serves; then runs after every call.
type scriptedDiscovery struct {
	*fakediscovery.FakeDiscovery
	failures int
	then     func()
}

func (d *scriptedDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if d.failures > 0 {
		d.failures--
		return nil, errors.New("connection refused")
	}
	defer d.then()
	return d.FakeDiscovery.ServerResourcesForGroupVersion(gv)
}

// served are the APIResourceLists that serve requiredCRDs[i] for each i.
func served(is ...int) []*metav1.APIResourceList {
	var out []*metav1.APIResourceList
	for _, i := range is {
		gvr := requiredCRDs[i]
		out = append(out, &metav1.APIResourceList{GroupVersion: gvr.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: gvr.Resource}}})
	}
	return out
}

// TestCRDWaiter: the ProvisioningRequest controller is set up once
// discovery answers and every CRD it needs is served: an API server not up
// yet, or a CRD not installed yet, only delays it. Before, a missing CRD
// made the provisioner exit when its cache gave up syncing, again and again.
func TestCRDWaiter(t *testing.T) {
	interval, retry := crdInterval, discoveryRetry
	crdInterval, discoveryRetry = 0, 0
	t.Cleanup(func() { crdInterval, discoveryRetry = interval, retry })
	fake := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: served(1, 2)}}
	if missing, err := (&crdWaiter{discovery: fake}).missing(); err != nil || !slices.Equal(missing, []string{"provisioningrequests.autoscaling.x-k8s.io"}) {
		t.Fatalf("missing %v, %v; want the ProvisioningRequest CRD", missing, err)
	}

	// Two failed calls, then two looks at the three CRDs without the
	// ProvisioningRequest one, then it is installed.
	looks := 0
	d := &scriptedDiscovery{FakeDiscovery: fake, failures: 2, then: func() {
		if looks++; looks == 6 {
			fake.Resources = served(0, 1, 2)
		}
	}}
	setups := 0
	c := &crdWaiter{discovery: d, setup: func() error {
		setups++
		return nil
	}}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if setups != 1 || d.failures != 0 || looks < 6 {
		t.Errorf("%d setups after %d failures left and %d looks; want one, after both failures and the CRD installed", setups, d.failures, looks)
	}
	if !slices.Equal(c.waiting, []string{"provisioningrequests.autoscaling.x-k8s.io"}) {
		t.Errorf("the waiter was waiting for %v, want the ProvisioningRequest CRD", c.waiting)
	}
}
