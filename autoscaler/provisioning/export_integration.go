//go:build integration

package provisioning

import (
	"context"

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
