package provisioning

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// A booking lands only where the tenant's pods could: each pod set's pod
// goes through the admission its pods would pass in the request's
// namespace, as a dry-run create, before it is checked against the quota,
// simulated and booked, on every path that books. Admission's mutations are
// kept (a namespace's node selector that PodNodeSelector adds, the
// tolerations PodTolerationRestriction merges in, a LimitRange's defaults),
// so the simulation places the booking as it would place the pods; a
// refusal (PodNodeSelector, PodTolerationRestriction, a
// ValidatingAdmissionPolicy, a webhook, MetadataPolicy) fails the request
// with admission's message. Identity-based policies see the provisioner's
// identity, not the tenant's (docs/security.md).

// admissionRefusal is admission's refusal of a pod set's pod.
type admissionRefusal struct {
	set string
	err error
}

func (e *admissionRefusal) Error() string {
	return fmt.Sprintf("a pod of set %s would not be admitted: %v", e.set, e.err)
}

// dryRunPrefix is the generateName of the dry-run pods.
const dryRunPrefix = "gantry-booking-check-"

// admitPodSets replaces each set's pod by what admission makes of it in the
// request's namespace. A refusal is an *admissionRefusal; any other error
// (admission unreachable, a timeout) is returned as is, for a retry.
func (r *Reconciler) admitPodSets(ctx context.Context, pr *provv1.ProvisioningRequest, sets []simulator.PodSet) error {
	for i := range sets {
		pod := sets[i].Pod.DeepCopy()
		pod.Name, pod.GenerateName, pod.Namespace = "", dryRunPrefix, pr.Namespace
		pod.ResourceVersion, pod.UID = "", ""
		// Set by the pods' controller and judged for its identity (owner
		// references need the owner's delete right): not the template's.
		pod.OwnerReferences, pod.Finalizers = nil, nil
		// The Priority plugin computes these from the class, as for a pod
		// a controller makes from a template that has none; a raw value
		// is the template's, never the booking's (package priority).
		pod.Spec.Priority, pod.Spec.PreemptionPolicy = nil, nil
		err := r.Client.Create(ctx, pod, client.DryRunAll)
		switch {
		case err == nil:
		case forbiddenFor(err, "exceeded quota: "):
			// ResourceQuota admits last: everything before it admitted the
			// pod, and the namespace's quota is checked by the provisioner
			// itself (it counts the request's pods that exist already, which
			// a single pod's create cannot). Its mutations are not known:
			// the template is used as it is.
			continue
		case forbiddenFor(err, "error looking up service account "):
			// The namespace's ServiceAccount is not made yet (a new
			// namespace): the pods would be refused too, for now.
			return fmt.Errorf("admitting a pod of set %s (dry run): %w", sets[i].Name, err)
		case notAuthorized(err):
			return fmt.Errorf("admitting a pod of set %s (dry run): the provisioner may not create pods (its ClusterRole grants pods create, for dry runs): %w", sets[i].Name, err)
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			return &admissionRefusal{set: sets[i].Name, err: err}
		default:
			return fmt.Errorf("admitting a pod of set %s (dry run): %w", sets[i].Name, err)
		}
		pod.Name, pod.GenerateName = sets[i].Pod.Name, ""
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[provv1.AnnotationConsume] = pr.Name
		// Status and the API server's bookkeeping are not the pod's spec.
		pod.Status = v1.PodStatus{}
		pod.ResourceVersion, pod.UID, pod.CreationTimestamp, pod.ManagedFields = "", "", sets[i].Pod.CreationTimestamp, nil
		sets[i].Pod = pod
	}
	return nil
}

// forbiddenFor reports whether err is a built-in admission plugin's
// refusal whose reason starts with prefix: kube-apiserver words them
// "<resource> \"<name>\" is forbidden: <reason>" (ResourceQuota's reason
// starts "exceeded quota: ", ServiceAccount's "error looking up service
// account "). No other admission's message can be made to read so:
// MetadataPolicy's reasons start "rejected by", webhooks' and admission
// policies' name themselves first.
func forbiddenFor(err error, prefix string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsForbidden(err) || !errors.As(err, &status) {
		return false
	}
	_, reason, ok := strings.Cut(status.Status().Message, " is forbidden: ")
	return ok && strings.HasPrefix(reason, prefix)
}

// notAuthorized reports whether err is authorization's refusal of the
// provisioner's own create, not admission's of the pod: an operator's
// error, retried, not the request's failure.
func notAuthorized(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), `cannot create resource "pods"`)
}
