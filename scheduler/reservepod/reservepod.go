package reservepod

import (
	"math"
	"strconv"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// Annotation marks the pods the Reservation plugin makes out of
// reservations. A reserve pod exists only inside the scheduler (queue and
// cache): it has no namespace, which no real pod can lack, and it has the
// reservation's UID.
const Annotation = "scheduling.gantry.dev/reserve-pod"

// PriorityAnnotation carries, on a reservation's pod in the cache, the
// reservation's own priority (the pod's is the highest there is).
const PriorityAnnotation = "scheduling.gantry.dev/reservation-priority"

// Is tells a reservation's pod, in the scheduler's cache or queue, from a
// real pod; its name is the reservation's name and its UID the
// reservation's UID.
func Is(p *v1.Pod) bool {
	return p.Namespace == "" && p.Annotations[Annotation] != ""
}

// VictimPriority is the priority p has as a preemption victim: a
// reservation's own priority for a reservation's pod, the higher of its own
// and its reservation's for an owner pod placed in a reservation. Whether p
// is placed in one, and that reservation's priority, come from allocs,
// never from p's annotation: with allocs nil, every real pod has its own
// priority.
func VictimPriority(p *v1.Pod, allocs Allocations) int32 {
	if Is(p) {
		v, _ := strconv.ParseInt(p.Annotations[PriorityAnnotation], 10, 32)
		return int32(v)
	}
	prio := int32(0)
	if p.Spec.Priority != nil {
		prio = *p.Spec.Priority
	}
	if allocs == nil {
		return prio
	}
	if _, ok := p.Annotations[schedv1alpha1.AnnotationAllocated]; !ok {
		return prio
	}
	if r, ok := allocs.AllocatedPriority(p); ok && r > prio {
		prio = r
	}
	return prio
}

// New is the pod the scheduler places for a pending reservation: its
// template as a single container holding the requests and host ports.
func New(r *schedv1alpha1.Reservation) *v1.Pod {
	t := r.Spec.Template
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              r.Name,
			UID:               r.UID,
			CreationTimestamp: r.CreationTimestamp,
			Annotations:       map[string]string{Annotation: r.Name},
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

// Cached is what stands for an Available reservation in the scheduler's
// cache: bound to its node, holding what its owners have not taken yet.
// Its priority is the highest there is, so that upstream's
// DefaultPreemption never picks a reservation as a victim (it would delete
// a pod that does not exist); Gantry's AsyncPreemption sees the
// reservation's own priority (VictimPriority) and preempts a reservation by
// failing it. base is New's pod.
func Cached(base *v1.Pod, node string, remaining v1.ResourceList) *v1.Pod {
	p := base.DeepCopy()
	p.Spec.NodeName = node
	own := int32(0)
	if base.Spec.Priority != nil {
		own = *base.Spec.Priority
	}
	p.Annotations[PriorityAnnotation] = strconv.Itoa(int(own))
	prio := int32(math.MaxInt32)
	p.Spec.Priority = &prio
	p.Spec.Containers[0].Resources.Requests = remaining
	p.Status.Phase = v1.PodRunning
	return p
}
