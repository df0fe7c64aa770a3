package reservation

import (
	"encoding/json"
	"math"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// reservePodAnnotation marks the pods this plugin makes out of reservations.
// A reserve pod exists only inside the scheduler (queue and cache): it has no
// namespace, which no real pod can lack, and it has the reservation's UID.
const reservePodAnnotation = "scheduling.gantry.dev/reserve-pod"

// reservePriorityAnnotation carries, on a reservation's pod in the cache,
// the reservation's own priority (the pod's is the highest there is).
const reservePriorityAnnotation = "scheduling.gantry.dev/reservation-priority"

// isReservePod tells a reservation's pod from a real pod.
func isReservePod(p *v1.Pod) bool {
	return p.Namespace == "" && p.Annotations[reservePodAnnotation] != ""
}

// IsReservePod tells a reservation's pod, in the scheduler's cache or
// queue, from a real pod; its name is the reservation's name and its UID
// the reservation's UID.
func IsReservePod(p *v1.Pod) bool { return isReservePod(p) }

// VictimPriority is the priority p has as a preemption victim: a
// reservation's own priority for a reservation's pod, the higher of its own
// and its reservation's for an owner pod placed in a reservation.
func VictimPriority(p *v1.Pod) int32 {
	if isReservePod(p) {
		v, _ := strconv.ParseInt(p.Annotations[reservePriorityAnnotation], 10, 32)
		return int32(v)
	}
	prio := int32(0)
	if p.Spec.Priority != nil {
		prio = *p.Spec.Priority
	}
	if v, ok := p.Annotations[schedv1alpha1.AnnotationAllocated]; ok {
		var a schedv1alpha1.ReservationAllocation
		if json.Unmarshal([]byte(v), &a) == nil && a.Priority > prio {
			prio = a.Priority
		}
	}
	return prio
}

// reservePod is the pod the scheduler places for a pending reservation: its
// template as a single container holding the requests and host ports.
func reservePod(r *schedv1alpha1.Reservation) *v1.Pod {
	t := r.Spec.Template
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              r.Name,
			UID:               r.UID,
			CreationTimestamp: r.CreationTimestamp,
			Annotations:       map[string]string{reservePodAnnotation: r.Name},
		},
		Spec: v1.PodSpec{
			NodeName:      t.NodeName,
			NodeSelector:  t.NodeSelector,
			Affinity:      t.Affinity,
			Tolerations:   t.Tolerations,
			SchedulerName: t.SchedulerName,
			Priority:      t.Priority,
			// As a pod's: preempting lower priorities unless Never.
			PreemptionPolicy: ptr.To(ptr.Deref(t.PreemptionPolicy, v1.PreemptLowerPriority)),
			Containers: []v1.Container{{
				Name:      "reserved",
				Resources: v1.ResourceRequirements{Requests: t.Requests},
				Ports:     t.HostPorts,
			}},
		},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	if p.Spec.SchedulerName == "" {
		p.Spec.SchedulerName = v1.DefaultSchedulerName
	}
	return p
}

// cachedReservePod is what stands for an Available reservation in the
// scheduler's cache: bound to its node, holding what its owners have not
// taken yet. Its priority is the highest there is, so that upstream's
// DefaultPreemption never picks a reservation as a victim (it would delete
// a pod that does not exist); Gantry's AsyncPreemption sees the
// reservation's own priority (VictimPriority) and preempts a reservation by
// failing it.
func cachedReservePod(base *v1.Pod, node string, remaining v1.ResourceList) *v1.Pod {
	p := base.DeepCopy()
	p.Spec.NodeName = node
	own := int32(0)
	if base.Spec.Priority != nil {
		own = *base.Spec.Priority
	}
	p.Annotations[reservePriorityAnnotation] = strconv.Itoa(int(own))
	prio := int32(math.MaxInt32)
	p.Spec.Priority = &prio
	p.Spec.Containers[0].Resources.Requests = remaining
	p.Status.Phase = v1.PodRunning
	return p
}

// subtract returns a − Σ bs, per resource of a, floored at zero.
func subtract(a v1.ResourceList, bs ...v1.ResourceList) v1.ResourceList {
	out := make(v1.ResourceList, len(a))
	for name, q := range a {
		left := q.DeepCopy()
		for _, b := range bs {
			if u, ok := b[name]; ok {
				left.Sub(u)
			}
		}
		if left.Sign() < 0 {
			left = *resource.NewQuantity(0, q.Format)
		}
		out[name] = left
	}
	return out
}

// sum adds resource lists.
func sum(ls ...v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for _, l := range ls {
		for name, q := range l {
			cur := out[name]
			cur.Add(q)
			out[name] = cur
		}
	}
	return out
}

// fits reports whether req fits in avail for every resource req names
// (zero requests always fit).
func fits(req, avail v1.ResourceList) bool {
	for name, q := range req {
		if q.IsZero() {
			continue
		}
		a, ok := avail[name]
		if !ok || a.Cmp(q) < 0 {
			return false
		}
	}
	return true
}
