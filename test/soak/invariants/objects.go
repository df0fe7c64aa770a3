package invariants

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/plugins/reservation"
)

// The provisioner's and scale-down's metadata, as they write it on
// Reservations, requests and nodes. They are part of the objects' contract
// (a renamed key strands every object written before), so the checker
// spells them out rather than importing the components it checks.
const (
	// labelRequestUID: provisioning.LabelRequestUID
	// (autoscaler/provisioning/conditions.go).
	labelRequestUID = "autoscaling.gantry.dev/provisioning-request-uid"
	// annotationRequest: provisioning.AnnotationRequest, "namespace/name".
	annotationRequest = "autoscaling.gantry.dev/provisioning-request"
	// annotationBookedPods: provisioning.AnnotationBookedPods.
	annotationBookedPods = "autoscaling.gantry.dev/booked-pods"
	// detailAttempts: provisioning.DetailAttempts, the count of a
	// request's failed attempts in status.provisioningClassDetails.
	detailAttempts = "gantry.dev/attempts"
	// labelAttempt: nodegroups.LabelAttempt, "<request UID>-<n>" on the
	// nodes an atomic scale-up attempt adds.
	labelAttempt = "autoscaling.gantry.dev/scale-up-attempt"
	// labelNodeGroup: nodegroups.LabelNodeGroup.
	labelNodeGroup = "autoscaling.gantry.dev/node-group"
)

// index is a snapshot looked up the ways the families need.
type index struct {
	now   time.Time
	s     *Snapshot
	nodes map[string]*v1.Node
	pods  map[types.UID]*v1.Pod
	// podsOnNode are the pods bound to each node.
	podsOnNode map[string][]*v1.Pod
	podsByNS   map[string][]*v1.Pod
	// allocated are the bound pods by the UID their allocation annotation
	// names.
	allocated map[types.UID][]*v1.Pod
	requests  map[types.UID]*provv1.ProvisioningRequest
	byKey     map[string]*provv1.ProvisioningRequest
	// bookings are the Reservations by the request UID they are labelled
	// with.
	bookings map[types.UID][]*schedv1alpha1.Reservation
}

func newIndex(s *Snapshot) *index {
	ix := &index{
		now:        s.Time,
		s:          s,
		nodes:      map[string]*v1.Node{},
		pods:       map[types.UID]*v1.Pod{},
		podsOnNode: map[string][]*v1.Pod{},
		podsByNS:   map[string][]*v1.Pod{},
		allocated:  map[types.UID][]*v1.Pod{},
		requests:   map[types.UID]*provv1.ProvisioningRequest{},
		byKey:      map[string]*provv1.ProvisioningRequest{},
		bookings:   map[types.UID][]*schedv1alpha1.Reservation{},
	}
	for _, n := range s.Nodes {
		ix.nodes[n.Name] = n
	}
	for _, p := range s.Pods {
		ix.pods[p.UID] = p
		ix.podsByNS[p.Namespace] = append(ix.podsByNS[p.Namespace], p)
		if p.Spec.NodeName == "" {
			continue
		}
		ix.podsOnNode[p.Spec.NodeName] = append(ix.podsOnNode[p.Spec.NodeName], p)
		if uid := allocatedTo(p); uid != "" {
			ix.allocated[uid] = append(ix.allocated[uid], p)
		}
	}
	for _, pr := range s.ProvisioningRequests {
		ix.requests[pr.UID] = pr
		ix.byKey[pr.Namespace+"/"+pr.Name] = pr
	}
	for _, r := range s.Reservations {
		if uid := types.UID(r.Labels[labelRequestUID]); uid != "" {
			ix.bookings[uid] = append(ix.bookings[uid], r)
		}
	}
	return ix
}

// allocatedTo is the UID of the Reservation p's allocation annotation
// names ("" for none, or one that cannot be read).
func allocatedTo(p *v1.Pod) types.UID {
	v := p.Annotations[schedv1alpha1.AnnotationAllocated]
	if v == "" {
		return ""
	}
	var a schedv1alpha1.ReservationAllocation
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		return ""
	}
	return a.UID
}

func terminalPod(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
}

func podRef(p *v1.Pod) ObjectRef {
	return ObjectRef{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

func reservationRef(r *schedv1alpha1.Reservation) ObjectRef {
	return ObjectRef{Kind: "Reservation", Name: r.Name, UID: r.UID}
}

func requestRef(pr *provv1.ProvisioningRequest) ObjectRef {
	return ObjectRef{Kind: "ProvisioningRequest", Namespace: pr.Namespace, Name: pr.Name, UID: pr.UID}
}

func nodeRef(n *v1.Node) ObjectRef {
	return ObjectRef{Kind: "Node", Name: n.Name, UID: n.UID}
}

// phase is r's phase; a new reservation has none and is Pending.
func phase(r *schedv1alpha1.Reservation) schedv1alpha1.ReservationPhase {
	if r.Status.Phase == "" {
		return schedv1alpha1.ReservationPending
	}
	return r.Status.Phase
}

// live reports whether r may still hold capacity: Pending or Available.
func live(r *schedv1alpha1.Reservation) bool {
	p := phase(r)
	return p == schedv1alpha1.ReservationPending || p == schedv1alpha1.ReservationAvailable
}

// terminalSince is when r became Succeeded or Failed: its Ready condition's
// transition, else its creation (statuscontroller.go terminalSince).
func terminalSince(r *schedv1alpha1.Reservation) time.Time {
	if c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionReady); c != nil {
		return c.LastTransitionTime.Time
	}
	return r.CreationTimestamp.Time
}

// owns reports whether one of r's owners selects pod, as the scheduler
// matches owners (scheduler/plugins/reservation/owners.go matches).
func owns(r *schedv1alpha1.Reservation, pod *v1.Pod) bool {
	for _, o := range r.Spec.Owners {
		switch {
		case o.Object != nil:
			if o.Object.Namespace == pod.Namespace && o.Object.Name == pod.Name && (o.Object.UID == "" || o.Object.UID == pod.UID) {
				return true
			}
		case o.Controller != nil:
			ref := metav1.GetControllerOf(pod)
			if ref != nil && o.Controller.Namespace == pod.Namespace && ref.Kind == o.Controller.Kind &&
				ref.Name == o.Controller.Name && (o.Controller.UID == "" || o.Controller.UID == ref.UID) &&
				(o.Controller.APIVersion == "" || o.Controller.APIVersion == ref.APIVersion) {
				return true
			}
		case o.LabelSelector != nil:
			sel, err := metav1.LabelSelectorAsSelector(o.LabelSelector)
			if err == nil && o.Namespace == pod.Namespace && sel.Matches(labels.Set(pod.Labels)) {
				return true
			}
		case o.Annotation != nil:
			if v, ok := pod.Annotations[o.Annotation.Key]; ok && o.Namespace == pod.Namespace && v == o.Annotation.Value {
				return true
			}
		}
	}
	return false
}

// placed are the pods placed in r, in any phase: bound to r's node with an
// allocation annotation naming r, and owners of r. The annotation alone
// proves nothing (tenants can write it); the scheduler counts a pod in a
// reservation on these three conditions (store.go entry.holds).
func (ix *index) placed(r *schedv1alpha1.Reservation) []*v1.Pod {
	if r.Status.NodeName == "" {
		return nil
	}
	var out []*v1.Pod
	for _, p := range ix.allocated[r.UID] {
		if p.Spec.NodeName == r.Status.NodeName && owns(r, p) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// held are the placed pods that have not finished: what the scheduler
// counts against r (store.go observePod).
func held(placed []*v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range placed {
		if !terminalPod(p) {
			out = append(out, p)
		}
	}
	return out
}

// holding is what r holds on its node as the scheduler counts it: an
// Available reservation that is not consumed (allocate-once with a
// recorded owner or a held pod) holds its requests less its held pods'
// (store.go consumed, remaining; mirror.go reconcile). Anything else
// holds nothing.
func holding(r *schedv1alpha1.Reservation, heldPods []*v1.Pod) v1.ResourceList {
	if phase(r) != schedv1alpha1.ReservationAvailable || r.Status.NodeName == "" {
		return nil
	}
	if reservation.AllocateOnce(r) && (len(r.Status.CurrentOwners) > 0 || len(heldPods) > 0) {
		return nil
	}
	used := make([]v1.ResourceList, 0, len(heldPods))
	for _, p := range heldPods {
		used = append(used, podRequests(p))
	}
	return reservation.Subtract(r.Spec.Template.Requests, used...)
}

func podRequests(p *v1.Pod) v1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

// addTo adds l into sum.
func addTo(sum, l v1.ResourceList) {
	for name, q := range l {
		cur := sum[name]
		cur.Add(q)
		sum[name] = cur
	}
}

// bookedPods is how many pods a booking's Reservation holds room for
// (provisioning.BookedPods: the annotation, 1 when absent or unreadable).
func bookedPods(r *schedv1alpha1.Reservation) int {
	n, err := strconv.Atoi(r.Annotations[annotationBookedPods])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// bookingOf is the request a Reservation books for: its UID label and its
// namespace/name annotation; ok is false for a Reservation that is no
// booking.
func bookingOf(r *schedv1alpha1.Reservation) (uid types.UID, namespace, name string, ok bool) {
	uid = types.UID(r.Labels[labelRequestUID])
	namespace, name, _ = strings.Cut(r.Annotations[annotationRequest], "/")
	return uid, namespace, name, uid != "" && namespace != "" && name != ""
}

// consumes is the request name p's consume annotation names (upstream's key
// first), "" for none.
func consumes(p *v1.Pod) string {
	if name := p.Annotations[provv1.AnnotationConsume]; name != "" {
		return name
	}
	return p.Annotations[provv1.AnnotationConsumeLegacy]
}

// terminalConditions end a request (provisioning request.go).
var terminalConditions = []string{provv1.ConditionFailed, provv1.ConditionBookingExpired, provv1.ConditionCapacityRevoked}

// ended is the earliest terminal condition of pr that is True, or nil.
func ended(pr *provv1.ProvisioningRequest) *metav1.Condition {
	var first *metav1.Condition
	for _, typ := range terminalConditions {
		c := meta.FindStatusCondition(pr.Status.Conditions, typ)
		if c != nil && c.Status == metav1.ConditionTrue && (first == nil || c.LastTransitionTime.Before(&first.LastTransitionTime)) {
			first = c
		}
	}
	return first
}

// requestedPods is the sum of pr's pod set counts.
func requestedPods(pr *provv1.ProvisioningRequest) int64 {
	var n int64
	for _, ps := range pr.Spec.PodSets {
		n += int64(ps.Count)
	}
	return n
}

// requestEnd is since when a booking's request no longer holds it (gone,
// being deleted, or ended) and how, as a phrase with that time; ok is
// false while the request lives.
func (c *Checker) requestEnd(ix *index, uid types.UID) (since time.Time, how string, pr *provv1.ProvisioningRequest, ok bool) {
	pr = ix.requests[uid]
	switch {
	case pr == nil:
		since = c.since("request-gone/"+string(uid), ix.now)
		return since, "has been gone since " + stamp(since) + ", as first seen", nil, true
	case pr.DeletionTimestamp != nil:
		return pr.DeletionTimestamp.Time, "has been deleted at " + stamp(pr.DeletionTimestamp.Time), pr, true
	}
	if e := ended(pr); e != nil {
		return e.LastTransitionTime.Time, fmt.Sprintf("ended at %s (%s=True, reason %s)", stamp(e.LastTransitionTime.Time), e.Type, e.Reason), pr, true
	}
	return time.Time{}, "", pr, false
}
