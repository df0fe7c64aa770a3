package provisioning

import (
	"context"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

var podEvaluator = core.NewPodEvaluator(nil, clock.RealClock{})

// quotaExceededError is a quota check's verdict that the request does not
// fit its namespace's quotas (the request then Fails with QuotaExceeded),
// as opposed to an error reading them.
type quotaExceededError struct{ msg string }

func (e *quotaExceededError) Error() string { return e.msg }

// demand is pods a quota check counts: count pods like pod. When pods is
// set, pod stands for that many pods at once (its requests are theirs
// together): its usage counts once, but as that many pods.
type demand struct {
	pod   *v1.Pod
	count int64
	pods  int64
}

// demands are the request's pod sets as demands: one per set, never one
// per pod, so the check costs the same for a count of 1 and of 2^31.
func demands(sets []simulator.PodSet) []demand {
	out := make([]demand, 0, len(sets))
	for _, s := range sets {
		out = append(out, demand{pod: s.Pod, count: int64(s.Count)})
	}
	return out
}

// checkNamespaceQuota checks the request's pods against its namespace's
// ResourceQuotas, counting the room that the namespace's other requests
// hold booked and their pods have not taken yet: a booking holds capacity
// for the namespace as its pods would. The caller holds bookMu, so the
// bookings of a request checked just before are counted (assumed if the
// cache does not show them yet) and two requests cannot both pass on the
// same room.
func (r *Reconciler) checkNamespaceQuota(ctx context.Context, rq *request) error {
	pr := rq.pr
	var quotas v1.ResourceQuotaList
	if err := r.Client.List(ctx, &quotas, client.InNamespace(pr.Namespace)); err != nil {
		return err
	}
	if len(quotas.Items) == 0 {
		return nil
	}
	qs := make([]*v1.ResourceQuota, len(quotas.Items))
	for i := range quotas.Items {
		qs[i] = &quotas.Items[i]
	}
	var rs schedv1alpha1.ReservationList
	// Read only: the cache's own objects, not copies.
	if err := r.Client.List(ctx, &rs, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	return checkQuota(qs, demands(rq.sets), heldBookings(r.withAssumed(rs.Items), pr.Namespace, pr.UID))
}

// heldBookings are the pods that the bookings of namespace's requests but
// the one of uid hold room for and that have not come yet, one demand per
// Reservation. Reservations are cluster-scoped and written by the
// provisioner only, so their request annotation and requests are not the
// tenant's to change. A Reservation carries requests only: quota scopes
// are judged as for a pod with those requests and no priority class or
// deadline.
func heldBookings(rs []schedv1alpha1.Reservation, namespace string, uid types.UID) []demand {
	var out []demand
	for i := range rs {
		res := &rs[i]
		ns, _, ok := strings.Cut(res.Annotations[AnnotationRequest], "/")
		if !ok || ns != namespace || res.Labels[LabelRequestUID] == string(uid) {
			continue
		}
		pods := BookedPods(res)
		requests := res.Spec.Template.Requests
		switch res.Status.Phase {
		case schedv1alpha1.ReservationAvailable:
			// The pods that came are in the quota's used already.
			pods -= min(len(res.Status.CurrentOwners), pods)
			requests = quota.RemoveZeros(quota.SubtractWithNonNegativeResult(requests, res.Status.Allocated))
		case "", schedv1alpha1.ReservationPending:
		default:
			continue // ended: it holds nothing
		}
		if pods <= 0 {
			continue
		}
		out = append(out, demand{count: 1, pods: int64(pods), pod: &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: res.Name},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "booked",
				Resources: v1.ResourceRequirements{Requests: requests}}}},
		}})
	}
	return out
}

// usage is what the demands that quota q matches count against it, with
// kube-apiserver's own pod usage and scope matching, computed once per
// demand.
func usage(q *v1.ResourceQuota, ds []demand) (v1.ResourceList, error) {
	total := v1.ResourceList{}
	for _, d := range ds {
		ok, err := podEvaluator.Matches(q, d.pod)
		if err != nil {
			return nil, fmt.Errorf("matching ResourceQuota %s: %w", q.Name, err)
		}
		if !ok {
			continue
		}
		u, err := podEvaluator.Usage(d.pod)
		if err != nil {
			return nil, fmt.Errorf("usage of pod %s/%s for ResourceQuota %s: %w", d.pod.Namespace, d.pod.Name, q.Name, err)
		}
		for name, v := range u {
			n := d.count
			if d.pods > 0 && isPodCount(name) {
				n, v = 1, *resource.NewQuantity(d.pods, resource.DecimalSI)
			}
			u[name] = times(v, n)
		}
		total = quota.Add(total, u)
	}
	return total, nil
}

// isPodCount reports whether name counts pods (one per pod) rather than
// what they request.
func isPodCount(name v1.ResourceName) bool {
	return name == v1.ResourcePods || name == "count/pods"
}

// times is q multiplied by n, exactly: Quantity.Mul goes on in decimal
// past int64 (its result only says the value is no longer an int64).
func times(q resource.Quantity, n int64) resource.Quantity {
	if n == 1 {
		return q
	}
	q = q.DeepCopy()
	q.Mul(n)
	return q
}

// show is q as a message says it: a binary quantity past int64 (2^31 pods
// of 1Ei), which Quantity.String cannot write, in decimal.
func show(q resource.Quantity) string {
	if _, ok := q.AsInt64(); !ok && q.Format == resource.BinarySI {
		q = *resource.NewDecimalQuantity(*q.AsDec(), resource.DecimalSI)
	}
	return q.String()
}

// checkQuota reports whether the namespace's ResourceQuotas can admit the
// pods wanted on top of what they already count as used and what the
// namespace's other bookings hold. The error (a *quotaExceededError)
// names each quota and resource that would be exceeded.
func checkQuota(quotas []*v1.ResourceQuota, want, held []demand) error {
	var problems []string
	for _, q := range quotas {
		// The quota controller copies spec.hard to status.hard; a quota it
		// has not seen yet limits as its spec says.
		if len(q.Status.Hard) == 0 {
			q = q.DeepCopy()
			q.Status.Hard = q.Spec.Hard
		}
		hard := q.Status.Hard
		wanted, err := usage(q, want)
		if err != nil {
			return err
		}
		booked, err := usage(q, held)
		if err != nil {
			return err
		}
		names := quota.ResourceNames(hard)
		total := quota.Add(quota.Add(quota.Mask(q.Status.Used, names), quota.Mask(booked, names)), quota.Mask(wanted, names))
		if ok, exceeded := quota.LessThanOrEqual(total, hard); !ok {
			sort.Slice(exceeded, func(i, j int) bool { return exceeded[i] < exceeded[j] })
			for _, r := range exceeded {
				used, h, add := q.Status.Used[r], hard[r], wanted[r]
				p := fmt.Sprintf("%s: %s requested %s, used %s", q.Name, r, show(add), show(used))
				if b, ok := booked[r]; ok && !b.IsZero() {
					p += fmt.Sprintf(", booked by the namespace's other requests %s", show(b))
				}
				problems = append(problems, p+fmt.Sprintf(", limited %s", show(h)))
			}
		}
	}
	if len(problems) > 0 {
		return &quotaExceededError{msg: "exceeded quota: " + strings.Join(problems, "; ")}
	}
	return nil
}
