package provisioning

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
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
	existing, err := r.existingConsumers(ctx, pr)
	if err != nil {
		return err
	}
	want, counted, err := alreadyCounted(qs, demands(rq.sets), existing)
	if err != nil {
		return err
	}
	err = checkQuota(qs, want, heldBookings(r.withAssumed(rs.Items), pr.Namespace, pr.UID))
	if qe := (*quotaExceededError)(nil); errors.As(err, &qe) && counted > 0 {
		qe.msg += fmt.Sprintf(" (%d of the request's pods exist already and were not counted again)", counted)
	}
	return err
}

// existingConsumers are the request's pods that exist already and that a
// ResourceQuota counts, at most as many as the request asks for. Kueue's
// pod, StatefulSet and LeaderWorkerSet integrations create a workload's
// pods up front, gated, and name the request on them (the consume
// annotation) only when they admit the workload, after the request is
// Provisioned; until then the request is tied to them through its owner,
// the Workload: pods that own it (a pod group's Workload lists its pods
// among its owners), or that have its controller as theirs (a
// StatefulSet's or LeaderWorkerSet's Workload is owned by it, as its pods
// are). A pod that names the request is its own, whatever its owners.
func (r *Reconciler) existingConsumers(ctx context.Context, pr *provv1.ProvisioningRequest) ([]*v1.Pod, error) {
	if r.Pods == nil {
		return nil, nil
	}
	pods, err := r.Pods.Pods(pr.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	owners, controller := r.ownerTies(ctx, pr)
	limit := requestedPods(pr)
	var out []*v1.Pod
	for _, p := range pods {
		if int64(len(out)) == limit {
			break
		}
		if !core.QuotaV1Pod(p, clock.RealClock{}) {
			continue
		}
		c := metav1.GetControllerOf(p)
		if consumes(p, pr.Name) || owners.Has(p.UID) || controller != "" && c != nil && c.UID == controller {
			out = append(out, p)
		}
	}
	return out, nil
}

// ownerTies reads the request's controller (a Kueue Workload): the UIDs of
// the pods among its owners, and the UID of its own controller. Only what
// the provisioner may get is read (its ClusterRole names Kueue's
// Workloads); any other owner, or one that cannot be read, ties no pod.
func (r *Reconciler) ownerTies(ctx context.Context, pr *provv1.ProvisioningRequest) (pods sets.Set[types.UID], controller types.UID) {
	pods = sets.New[types.UID]()
	ref := metav1.GetControllerOf(pr)
	if ref == nil || r.APIReader == nil {
		return pods, ""
	}
	owner := &metav1.PartialObjectMetadata{}
	owner.APIVersion, owner.Kind = ref.APIVersion, ref.Kind
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: pr.Namespace, Name: ref.Name}, owner); err != nil || owner.UID != ref.UID {
		klog.FromContext(ctx).V(2).Info("Not reading the request's owner for its pods", "owner", ref.Kind+"/"+ref.Name, "err", err)
		return pods, ""
	}
	for _, o := range owner.OwnerReferences {
		if o.Kind == "Pod" && o.APIVersion == "v1" {
			pods.Insert(o.UID)
		}
	}
	if c := metav1.GetControllerOf(owner); c != nil {
		controller = c.UID
	}
	return pods, controller
}

// consumes reports whether pod names request (either annotation).
func consumes(pod *v1.Pod, request string) bool {
	return pod.Annotations[provv1.AnnotationConsume] == request || pod.Annotations[provv1.AnnotationConsumeLegacy] == request
}

// alreadyCounted lowers each pod set's count by the request's existing
// pods that stand for one of its pods: a quota counts them as used
// already, and the request's pods are checked on top of what is used.
// A pod stands for a pod of a set when it uses at least what the set's pod
// uses, resource by resource, and every quota matches both or neither (a
// larger pod does not lower the count by more than one, so a tenant cannot
// shrink what its request is checked for by making one pod big). counted
// is how many pods were taken off.
func alreadyCounted(quotas []*v1.ResourceQuota, want []demand, existing []*v1.Pod) (out []demand, counted int, err error) {
	out = slices.Clone(want)
	if len(existing) == 0 {
		return out, 0, nil
	}
	quotas = slices.Clone(quotas)
	for i := range quotas {
		quotas[i] = withHard(quotas[i])
	}
	setUsage := make([]v1.ResourceList, len(want))
	setMatch := make([][]bool, len(want))
	for i, d := range want {
		if setUsage[i], err = podEvaluator.Usage(d.pod); err != nil {
			return nil, 0, err
		}
		if setMatch[i], err = matches(quotas, d.pod); err != nil {
			return nil, 0, err
		}
	}
	for _, p := range existing {
		u, err := podEvaluator.Usage(p)
		if err != nil {
			return nil, 0, err
		}
		m, err := matches(quotas, p)
		if err != nil {
			return nil, 0, err
		}
		for i := range out {
			if out[i].count == 0 || !slices.Equal(m, setMatch[i]) {
				continue
			}
			if covers(u, setUsage[i]) {
				out[i].count--
				counted++
				break
			}
		}
	}
	return out, counted, nil
}

// withHard is q with its status.hard: the quota controller copies
// spec.hard there, and a quota it has not seen yet limits (and matches
// pods) as its spec says.
func withHard(q *v1.ResourceQuota) *v1.ResourceQuota {
	if len(q.Status.Hard) == 0 {
		q = q.DeepCopy()
		q.Status.Hard = q.Spec.Hard
	}
	return q
}

// covers reports whether have is at least need in every resource of need
// (quota.LessThanOrEqual compares only the resources of its second list).
func covers(have, need v1.ResourceList) bool {
	for name, q := range need {
		h, ok := have[name]
		if !ok && !q.IsZero() || ok && h.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// matches says, for each quota (with its status.hard), whether it counts
// pod.
func matches(quotas []*v1.ResourceQuota, pod *v1.Pod) ([]bool, error) {
	out := make([]bool, len(quotas))
	for i, q := range quotas {
		ok, err := podEvaluator.Matches(q, pod)
		if err != nil {
			return nil, fmt.Errorf("matching ResourceQuota %s: %w", q.Name, err)
		}
		out[i] = ok
	}
	return out, nil
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
		q = withHard(q)
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
