// Package gangs holds the e2e specs of gangs (PodGroups of
// scheduling.k8s.io/v1beta1 with a gang policy) meeting Gantry's bookings
// and preemption, on the gang-scheduling variant of the cluster
// (gantry-cluster up --gang-scheduling): a ProvisioningRequest booking for a
// PodGroup whose gang is placed whole in it or not at all, a request made
// for an unschedulable gang that scales up for it, and AsyncPreemption
// preempting for a whole gang and never for half of one.
//
// The specs measure capacity, so they run one at a time (Serial) on a
// cluster of their own (two kwok nodes); the provisioner makes atomic
// scale-up requests for unschedulable gangs, so that a gang too large for
// the cluster gets nodes of the local node group "general".
package gangs

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestGangs(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry gangs suite")
}

var _ = framework.SetupSuite(framework.WithCluster("gangs"), framework.WithGangScheduling(), framework.WithFakeNodesOnly(),
	framework.WithNodes(2), framework.WithProvisionerArgs("pod-group-requests-class="+provv1.ClassBestEffortAtomicScaleUp))
