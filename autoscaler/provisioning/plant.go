package provisioning

import (
	"context"
	"strings"

	"k8s.io/klog/v2"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/internal/plant"
)

// twinSuffix names the second Reservation the ProvisioningRequest plant
// (internal/plant) creates for each booking.
const twinSuffix = "-twin"

// createTwin is the ProvisioningRequest plant: a second Reservation like b,
// for the same request, that the provisioner then does not see
// (withoutTwins), as a create retried under a new name would leave behind.
// The request is served twice; the soak's checker must say so. Called only
// when plant.ProvisioningRequest is on.
func (r *Reconciler) createTwin(ctx context.Context, b *schedv1alpha1.Reservation) {
	twin := b.DeepCopy()
	twin.Name += twinSuffix
	twin.ResourceVersion, twin.UID = "", ""
	if err := r.Client.Create(ctx, twin); err != nil {
		klog.FromContext(ctx).Error(err, "Planted bug: creating a twin booking", "reservation", twin.Name)
	}
}

// withoutTwins is list, less the planted twins when the ProvisioningRequest
// plant is on; list itself otherwise.
func withoutTwins(list []schedv1alpha1.Reservation) []schedv1alpha1.Reservation {
	if !plant.ProvisioningRequest {
		return list
	}
	out := list[:0:0]
	for _, res := range list {
		if !strings.HasSuffix(res.Name, twinSuffix) {
			out = append(out, res)
		}
	}
	return out
}
