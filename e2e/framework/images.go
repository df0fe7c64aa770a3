package framework

import (
	"fmt"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/runtime/local"
)

// HostProcesses tells whether the suite's cluster runs its control plane
// as processes on this machine (the local runtime): its kube-apiserver
// then reaches servers a suite starts on 127.0.0.1. On any other cluster a
// suite deploys what it needs as workloads (see Image).
func HostProcesses() bool {
	return TestContext.Local != nil && TestContext.Local.Runtime().Name() == local.Name
}

// Image is the reference of a Gantry component's image (e.g.
// gantry-webhook) that the nodes of the suite's cluster have: the kind
// runtime's nodes preload them.
func Image(component string) (string, error) {
	if TestContext.Local == nil {
		return "", fmt.Errorf("the image of %s: the suite tests a cluster that Gantry's cluster program did not make, and cannot tell which images its nodes have", component)
	}
	namer, ok := TestContext.Local.Runtime().(cluster.ImageNamer)
	if !ok {
		return "", fmt.Errorf("the image of %s: the %s runtime's nodes run no images", component, TestContext.Local.Runtime().Name())
	}
	return namer.Image(component), nil
}
