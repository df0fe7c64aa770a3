package provisioning

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	quota "k8s.io/apiserver/pkg/quota/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// podSets are the request's pod sets as pods; missing names a PodTemplate
// that does not exist.
func (r *Reconciler) podSets(ctx context.Context, pr *provv1.ProvisioningRequest) ([]simulator.PodSet, string, error) {
	out := make([]simulator.PodSet, 0, len(pr.Spec.PodSets))
	for i, ps := range pr.Spec.PodSets {
		t, err := r.podTemplate(ctx, types.NamespacedName{Namespace: pr.Namespace, Name: ps.PodTemplateRef.Name})
		if apierrors.IsNotFound(err) {
			return nil, ps.PodTemplateRef.Name, nil
		}
		if err != nil {
			return nil, "", err
		}
		pod := &v1.Pod{ObjectMeta: *t.Template.ObjectMeta.DeepCopy(), Spec: *t.Template.Spec.DeepCopy()}
		pod.Namespace = pr.Namespace
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[provv1.AnnotationConsume] = pr.Name
		out = append(out, simulator.PodSet{Name: fmt.Sprintf("%d-%s", i, ps.PodTemplateRef.Name), Pod: pod, Count: int(ps.Count)})
	}
	return out, "", nil
}

// cluster is the simulation's starting point for pr: nodes (but those of
// other requests' scale-ups in flight), bound pods that hold capacity, and
// every Reservation with a node, as a pod holding what the scheduler holds
// for it (what its live owners have not taken). The integration test
// TestSimulationAgreesWithScheduler holds it up against the scheduler.
func (r *Reconciler) cluster(ctx context.Context, pr *provv1.ProvisioningRequest) (simulator.Cluster, error) {
	var c simulator.Cluster
	nodes, err := r.Nodes.List(labels.Everything())
	if err != nil {
		return c, err
	}
	others, err := r.InFlightAttempts(ctx, pr.UID)
	if err != nil {
		return c, err
	}
	for _, n := range nodes {
		if attempt, ok := n.Labels[nodegroups.LabelAttempt]; !ok || !others[attempt] {
			c.Nodes = append(c.Nodes, n)
		}
	}
	pods, err := r.Pods.List(labels.Everything())
	if err != nil {
		return c, err
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			c.Pods = append(c.Pods, p)
		}
	}
	var rs schedv1alpha1.ReservationList
	// Read only: the cache's own objects, not copies.
	if err := r.Client.List(ctx, &rs, client.UnsafeDisableDeepCopy); err != nil {
		return c, err
	}
	all := r.withAssumed(rs.Items)
	for i := range all {
		if p := reservationPod(r.withLiveAllocation(&all[i])); p != nil {
			c.Pods = append(c.Pods, p)
		}
	}
	return c, nil
}

// withLiveAllocation is res or, when owners that its status records have
// finished or gone, a copy whose status.allocated sums up those that still
// run. The scheduler counts against a Reservation the live owners bound
// into it (plugins/reservation, store.remaining). Its status controller
// records them, but keeps the last ones it recorded once none is left (an
// owner that finished has still consumed an allocate-once Reservation): a
// Reservation shared by several pods then holds its whole template again
// in the scheduler while its status.allocated says less, and the
// simulation would book room the scheduler does not grant. The recorded
// owners passed the scheduler's owner check; the pods say which still run.
func (r *Reconciler) withLiveAllocation(res *schedv1alpha1.Reservation) *schedv1alpha1.Reservation {
	st := &res.Status
	if r.Pods == nil || st.Phase != schedv1alpha1.ReservationAvailable || len(st.CurrentOwners) == 0 ||
		res.Spec.AllocateOnce == nil || *res.Spec.AllocateOnce {
		return res
	}
	var live v1.ResourceList
	gone := false
	for _, o := range st.CurrentOwners {
		p, err := r.Pods.Pods(o.Namespace).Get(o.Name)
		if err != nil || p.UID != o.UID || p.Spec.NodeName != st.NodeName ||
			p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			gone = true
			continue
		}
		live = quota.Add(live, resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
	}
	if !gone {
		return res
	}
	out := *res // a shallow copy: the cache's object is not to be written
	out.Status.Allocated = live
	return &out
}

// reservationPod is the pod standing for the capacity a Reservation holds,
// or nil when it holds none.
func reservationPod(res *schedv1alpha1.Reservation) *v1.Pod {
	t := res.Spec.Template
	var node string
	requests := t.Requests
	switch res.Status.Phase {
	case schedv1alpha1.ReservationAvailable:
		node = res.Status.NodeName
		requests = quota.RemoveZeros(quota.SubtractWithNonNegativeResult(t.Requests, res.Status.Allocated))
	case "", schedv1alpha1.ReservationPending:
		if unplaceable(res) {
			return nil
		}
		node = t.NodeName // a booking being placed already names its node
	}
	if node == "" {
		return nil
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: res.Name, UID: res.UID, Namespace: "reservations"},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "reserved",
			Resources: v1.ResourceRequirements{Requests: requests}, Ports: t.HostPorts}}},
	}
}

// unplaceable reports whether the scheduler has tried a pending
// Reservation that may not preempt (every booking) and found no room for
// it: its node's room was taken between the simulation and the booking.
// The scheduler holds nothing for it then (it counts a pending Reservation
// only once it preempts, nominated to the node its victims leave), and
// grants the room to any pod, until it places it; the booking's request
// gives it up after its placement timeout.
func unplaceable(res *schedv1alpha1.Reservation) bool {
	if p := res.Spec.Template.PreemptionPolicy; p == nil || *p != v1.PreemptNever {
		return false
	}
	c := meta.FindStatusCondition(res.Status.Conditions, schedv1alpha1.ConditionScheduled)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == schedv1alpha1.ReasonUnschedulable
}

func countPods(sets []simulator.PodSet) int {
	n := 0
	for _, s := range sets {
		n += s.Count
	}
	return n
}
