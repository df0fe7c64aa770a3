package provisioning

import (
	"context"
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// A booked pod has come once one of the request's pods was bound into its
// Reservation, whether that pod still runs or has finished since. The
// Reservation's status.currentOwners alone cannot say so: the scheduler's
// status controller records the owners it finds running, so a pod that
// binds and finishes between two of its passes (short batch pods, as Kueue
// runs them) is never recorded, and a multi-pod Reservation lists only the
// owners running at its last pass. The pods themselves keep the record:
// the scheduler binds an owner with AnnotationAllocated (the Reservation's
// name and UID) in the same write as its node, and a finished pod keeps
// both until it is deleted.

// IndexPodBooking indexes pods by the Reservation they were bound into:
// the UID of AnnotationAllocated, for pods that have a node.
const IndexPodBooking = "gantry.provisioning/booking"

// IndexPodRequest indexes pods that have a node by the request their
// consume annotation names: "<namespace>/<name>".
const IndexPodRequest = "gantry.provisioning/request"

// IndexPodGroup indexes pods that have a node by the PodGroup their
// spec.schedulingGroup names: "<namespace>/<group>".
const IndexPodGroup = "gantry.provisioning/pod-group"

// maxAllocationAnnotation bounds the allocation annotations the index
// decodes: the scheduler writes about a hundred bytes; a longer value is a
// tenant's, and is not read.
const maxAllocationAnnotation = 1024

// PodIndexers are the indexers Reconciler.PodInformer carries (add them
// before it starts).
func PodIndexers() cache.Indexers {
	return cache.Indexers{IndexPodBooking: podBookingIndex, IndexPodRequest: podRequestIndex, IndexPodGroup: podGroupIndex}
}

func podGroupIndex(obj any) ([]string, error) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil, nil
	}
	if g := schedv1alpha1.PodGroupOf(p); g != "" {
		return []string{p.Namespace + "/" + g}, nil
	}
	return nil, nil
}

// groupOwner is the PodGroup a Reservation's owners name in namespace ns,
// "" for none: the booking of a request with ParameterPodGroup. The
// provisioner wrote the owners; tenants cannot write Reservations.
func groupOwner(res *schedv1alpha1.Reservation, ns string) string {
	for _, o := range res.Spec.Owners {
		if o.PodGroup != "" && o.Namespace == ns {
			return o.PodGroup
		}
	}
	return ""
}

func podRequestIndex(obj any) ([]string, error) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil, nil
	}
	if name := consumes(p); name != "" && len(name) <= validation.DNS1123SubdomainMaxLength {
		return []string{p.Namespace + "/" + name}, nil
	}
	return nil, nil
}

func podBookingIndex(obj any) ([]string, error) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil, nil
	}
	if uid := allocatedTo(p); uid != "" {
		return []string{string(uid)}, nil
	}
	return nil, nil
}

// allocatedTo is the UID of the Reservation p's allocation annotation
// names, "" for none or one that cannot be read.
func allocatedTo(p *v1.Pod) types.UID {
	v := p.Annotations[schedv1alpha1.AnnotationAllocated]
	if v == "" || len(v) > maxAllocationAnnotation {
		return ""
	}
	var a schedv1alpha1.ReservationAllocation
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		return ""
	}
	return a.UID
}

// consumes is the name of the request p's consume annotation names
// (upstream's key first, then the older one), "" for none.
func consumes(p *v1.Pod) string {
	if name := p.Annotations[provv1.AnnotationConsume]; name != "" {
		return name
	}
	return p.Annotations[provv1.AnnotationConsumeLegacy]
}

// cameTo counts the booked pods of res that came: the owners its status
// records, and the pods bound into it that it does not record (see the top
// of this file), at most its booked pods. A pod counts only if it is in the
// request's namespace, names the request in its consume annotation or is
// a member of the PodGroup res's owners name, and is on res's node: the
// allocation annotation is the tenant's to write, so a forged one can only
// end the tenant's own request early.
func (r *Reconciler) cameTo(res *schedv1alpha1.Reservation) int {
	booked := BookedPods(res)
	recorded := len(res.Status.CurrentOwners)
	if r.PodInformer == nil || recorded >= booked || res.Status.NodeName == "" {
		return min(recorded, booked)
	}
	ns, name, err := cache.SplitMetaNamespaceKey(res.Annotations[AnnotationRequest])
	if err != nil || ns == "" || name == "" {
		return min(recorded, booked)
	}
	came := make(map[types.UID]bool, booked)
	for _, o := range res.Status.CurrentOwners {
		came[o.UID] = true
	}
	objs, err := r.PodInformer.GetIndexer().ByIndex(IndexPodBooking, string(res.UID))
	if err != nil {
		return min(recorded, booked)
	}
	group := groupOwner(res, ns)
	for _, obj := range objs {
		p, ok := obj.(*v1.Pod)
		if ok && p.Namespace == ns && p.Spec.NodeName == res.Status.NodeName &&
			(consumes(p) == name || group != "" && schedv1alpha1.PodGroupOf(p) == group) {
			came[p.UID] = true
		}
	}
	return min(len(came), booked)
}

// cameElsewhere counts the request's pods that were bound outside its
// booking: pods of its namespace, created after it, that name it in their
// consume annotation or are members of its PodGroup (ParameterPodGroup),
// and were not bound into one of its Reservations
// (bookings). Such a pod could not use its booking (a nodeSelector of its
// own named another node, as Kueue's topology-aware scheduling gives its
// pods) or the scheduler found it a better node; it took room of its own,
// and the room booked for it is not needed any more. As with cameTo, a
// tenant's forged pod can only end the tenant's own request early; the
// count stops at limit.
func (r *Reconciler) cameElsewhere(pr *provv1.ProvisioningRequest, bookings []schedv1alpha1.Reservation, limit int) int {
	if r.PodInformer == nil || limit <= 0 {
		return 0
	}
	objs, err := r.PodInformer.GetIndexer().ByIndex(IndexPodRequest, pr.Namespace+"/"+pr.Name)
	if err != nil {
		return 0
	}
	if g := RequestPodGroup(pr); g != "" {
		members, err := r.PodInformer.GetIndexer().ByIndex(IndexPodGroup, pr.Namespace+"/"+g)
		if err != nil {
			return 0
		}
		objs = append(objs, members...)
	}
	own := make(map[types.UID]bool, len(bookings))
	for i := range bookings {
		own[bookings[i].UID] = true
		for _, o := range bookings[i].Status.CurrentOwners {
			own[o.UID] = true
		}
	}
	// A pod bound into no Reservation has no allocation UID.
	delete(own, "")
	n := 0
	for _, obj := range objs {
		p, ok := obj.(*v1.Pod)
		if !ok || p.Namespace != pr.Namespace || own[p.UID] || own[allocatedTo(p)] ||
			p.CreationTimestamp.Before(&pr.CreationTimestamp) {
			continue
		}
		// A member that consumes the request too is listed twice.
		own[p.UID] = true
		if n++; n == limit {
			break
		}
	}
	return n
}

// requestsOfBoundPod enqueues the requests a pod that has a node consumes
// (requestOfBoundPod) and those that name its PodGroup (ParameterPodGroup).
func (r *Reconciler) requestsOfBoundPod(ctx context.Context, p *v1.Pod) []reconcile.Request {
	out := requestOfBoundPod(p)
	g := schedv1alpha1.PodGroupOf(p)
	if g == "" || p.Spec.NodeName == "" {
		return out
	}
	var list provv1.ProvisioningRequestList
	opts := []client.ListOption{client.InNamespace(p.Namespace), client.UnsafeDisableDeepCopy}
	if !r.noPodGroupIndex {
		opts = append(opts, client.MatchingFields{IndexRequestPodGroup: g})
	}
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		klog.FromContext(ctx).V(2).Info("Not listing the requests of a PodGroup", "pod", klog.KObj(p), "podGroup", g, "err", err)
		return out
	}
	for i := range list.Items {
		pr := &list.Items[i]
		if RequestPodGroup(pr) == g && (len(out) == 0 || out[0].Name != pr.Name) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)})
		}
	}
	return out
}

// IndexRequestPodGroup indexes requests by the PodGroup their
// ParameterPodGroup names.
const IndexRequestPodGroup = "gantry.provisioning/pod-group"

// indexRequestPodGroup is IndexRequestPodGroup's function.
func indexRequestPodGroup(o client.Object) []string {
	pr, ok := o.(*provv1.ProvisioningRequest)
	if !ok {
		return nil
	}
	if g := RequestPodGroup(pr); g != "" {
		return []string{g}
	}
	return nil
}

// requestOfBoundPod enqueues the request a pod that has a node consumes, so
// that a booking whose pods all came ends even when no Reservation status
// changes (every pod finished before the scheduler recorded it, or was
// bound outside the booking).
func requestOfBoundPod(p *v1.Pod) []reconcile.Request {
	name := consumes(p)
	if name == "" || p.Spec.NodeName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: name}}}
}
