//go:build integration

package provisioning

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// SimulatedCluster is what the simulation of a new request (one with no
// scale-up of its own) starts from: the nodes, the pods holding capacity
// and the Reservations as pods, as cluster builds them. It is built only
// with the integration tag, for the tests that hold the simulation up
// against Gantry's scheduler (integration/agreement_test.go).
func (r *Reconciler) SimulatedCluster(ctx context.Context) (simulator.Cluster, error) {
	return r.cluster(ctx, &provv1.ProvisioningRequest{})
}

// AllocatedTo is the UID of the Reservation a pod's allocation annotation
// (written by the scheduler at bind) names, "" for none or one that cannot
// be read: what the provisioner reads, for the agreement tests.
func AllocatedTo(p *v1.Pod) types.UID { return allocatedTo(p) }
