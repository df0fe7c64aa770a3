package provisioning

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// What keeps a node: a pod (HoldsNode), a booking (BookedNodes), or a
// scale-up attempt still in flight (InFlightAttempts). A simulation leaves
// out the nodes of other requests' attempts in flight; a rollback and the
// removal of a deleted request's nodes keep the nodes in use; scale-down
// (package scaledown) removes only nodes that nothing keeps.

// HoldsNode reports whether a pod keeps its node from being unneeded: any
// pod not terminated, but DaemonSet and mirror pods, which every node has.
func HoldsNode(p *v1.Pod) bool {
	if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[v1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

// NodesInUse are the nodes that hold a pod (see HoldsNode) or a booking
// (a Reservation placed there or pinned to it), but those of the request
// of UID except ("": none), as the caches show them.
func (r *Reconciler) NodesInUse(ctx context.Context, except types.UID) (map[string]bool, error) {
	used, err := r.BookedNodes(ctx, false, except)
	if err != nil {
		return nil, err
	}
	pods, err := r.Pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" && HoldsNode(p) {
			used[p.Spec.NodeName] = true
		}
	}
	return used, nil
}

// BookedNodes are the nodes that hold a booking (a Reservation placed
// there or pinned to it), but those of the request of UID except ("":
// none), read from the cache to find candidates (live false), through the
// API reader just before a node is deleted (live true).
func (r *Reconciler) BookedNodes(ctx context.Context, live bool, except types.UID) (map[string]bool, error) {
	var rs schedv1alpha1.ReservationList
	reader, opts := client.Reader(r.Client), []client.ListOption{client.UnsafeDisableDeepCopy}
	if live && r.APIReader != nil {
		reader, opts = r.APIReader, nil
	}
	used := map[string]bool{}
	if err := reader.List(ctx, &rs, opts...); CRDMissing(err) {
		// No booking exists without the Reservation CRD.
		return used, nil
	} else if err != nil {
		return nil, fmt.Errorf("listing the Reservations: %w", err)
	}
	for i := range rs.Items {
		res := &rs.Items[i]
		if except != "" && res.Labels[LabelRequestUID] == string(except) {
			continue
		}
		switch res.Status.Phase {
		case schedv1alpha1.ReservationAvailable:
			used[res.Status.NodeName] = true
		case "", schedv1alpha1.ReservationPending:
			if res.Spec.Template.NodeName != "" {
				used[res.Spec.Template.NodeName] = true
			}
		}
	}
	return used, nil
}

// InFlightAttempts are the scale-up attempts of requests, but the one of
// UID except ("": none), whose nodes are not booked yet: no other
// request's simulation may count on them, and scale-down leaves them
// alone.
func (r *Reconciler) InFlightAttempts(ctx context.Context, except types.UID) (map[string]bool, error) {
	var list provv1.ProvisioningRequestList
	out := map[string]bool{}
	// Read only: the cache's own objects, not copies (every simulation
	// lists them all).
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); CRDMissing(err) {
		// No request exists without the ProvisioningRequest CRD.
		return out, nil
	} else if err != nil {
		return nil, err
	}
	for i := range list.Items {
		rq := newRequest(&list.Items[i])
		if rq.scaleUpInFlight() && (except == "" || rq.pr.UID != except) {
			a, _ := rq.ownAttempt()
			out[a] = true
		}
	}
	return out, nil
}

// CRDMissing reports whether err, from a list, says that the resource is
// not served: its CustomResourceDefinition is not installed, so none of its
// objects exists (a collection is otherwise never NotFound).
func CRDMissing(err error) bool {
	return err != nil && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err))
}
