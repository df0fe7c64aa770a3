// Package quota checks a ProvisioningRequest's pods against its
// namespace's ResourceQuotas before they are booked, with
// kube-apiserver's own pod usage and scope matching: a booking holds
// capacity for the namespace as its pods would, so the namespace's other
// bookings count (the provisioner passes them in as held demands), and the
// request's pods that exist already (ExistingConsumers) are not counted
// twice (AlreadyCounted).
//
// Requests are written by tenants, so the check costs the same whatever
// their counts: each pod set's usage is computed once and multiplied by
// its count (Demand), never pod by pod. The provisioner runs the check
// under its booking lock and fails a request that does not fit with the
// reason its conditions.go names for an *ExceededError.
package quota

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
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

var podEvaluator = core.NewPodEvaluator(nil, clock.RealClock{})

// ExceededError is a quota check's verdict that the request does not fit
// its namespace's quotas, as opposed to an error reading them.
type ExceededError struct{ msg string }

func (e *ExceededError) Error() string { return e.msg }

// Demand is pods a quota check counts: Count pods like Pod. When Pods is
// set, Pod stands for that many pods at once (its requests are theirs
// together): its usage counts once, but as that many pods.
type Demand struct {
	Pod   *v1.Pod
	Count int64
	Pods  int64
}

// Demands are a request's pod sets as demands: one per set, never one per
// pod, so the check costs the same for a count of 1 and of 2^31.
func Demands(sets []simulator.PodSet) []Demand {
	out := make([]Demand, 0, len(sets))
	for _, s := range sets {
		out = append(out, Demand{Pod: s.Pod, Count: int64(s.Count)})
	}
	return out
}

// Held is the demand of room booked in namespace for pods that have not
// come yet: requests for that many pods together. A booking carries
// requests only: quota scopes are judged as for a pod with those requests
// and no priority class or deadline; name names the pod in messages.
func Held(namespace, name string, requests v1.ResourceList, pods int) Demand {
	return Demand{Count: 1, Pods: int64(pods), Pod: &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "booked",
			Resources: v1.ResourceRequirements{Requests: requests}}}},
	}}
}

// CheckRequest checks a request's pods (want) against its namespace's
// quotas, on top of what they count as used and what the namespace's
// other bookings hold (held), not counting again the request's pods that
// exist already (existing; see AlreadyCounted). The error, an
// *ExceededError, names each quota and resource that would be exceeded.
func CheckRequest(quotas []*v1.ResourceQuota, want []Demand, existing []*v1.Pod, held []Demand) error {
	want, counted, err := AlreadyCounted(quotas, want, existing)
	if err != nil {
		return err
	}
	err = Check(quotas, want, held)
	if qe := (*ExceededError)(nil); errors.As(err, &qe) && counted > 0 {
		qe.msg += fmt.Sprintf(" (%d of the request's pods exist already and were not counted again)", counted)
	}
	return err
}

// ExistingConsumers are the request's pods that exist already, are not yet
// bound to a node and not being deleted, and that a ResourceQuota counts,
// at most limit (as many as the request asks for),
// from pods. Kueue's pod, StatefulSet and LeaderWorkerSet integrations
// create a workload's pods up front, gated, and name the request on them
// (the consume annotation) only when they admit the workload, after the
// request is Provisioned; until then the request is tied to them through
// its owner, the Workload, read through owners: pods that own it (a pod
// group's Workload lists its pods among its owners), or that have its
// controller as theirs (a StatefulSet's or LeaderWorkerSet's Workload is
// owned by it, as its pods are). A pod that names the request is its own,
// whatever its owners, and so is a member of podGroup ("" for none), the
// PodGroup whose members may use the request's booking.
func ExistingConsumers(ctx context.Context, pods corelisters.PodLister, owners client.Reader, pr *provv1.ProvisioningRequest, podGroup string, limit int64) ([]*v1.Pod, error) {
	if pods == nil {
		return nil, nil
	}
	all, err := pods.Pods(pr.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	owned, controller := ownerTies(ctx, owners, pr)
	var out []*v1.Pod
	for _, p := range all {
		if int64(len(out)) == limit {
			break
		}
		// Only a pod still to be placed stands for one of the request's
		// pods: a bound pod holds its quota already, whatever it names
		// (the consume annotation is the tenant's to write), and a pod
		// being deleted is on its way out.
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || !core.QuotaV1Pod(p, clock.RealClock{}) {
			continue
		}
		c := metav1.GetControllerOf(p)
		if consumes(p, pr.Name) || podGroup != "" && schedv1alpha1.PodGroupOf(p) == podGroup ||
			owned.Has(p.UID) || controller != "" && c != nil && c.UID == controller {
			out = append(out, p)
		}
	}
	return out, nil
}

// ownerTies reads the request's controller (a Kueue Workload) through
// reader (nil: none is read): the UIDs of the pods among its owners, and
// the UID of its own controller. Only what the provisioner may get is read
// (its ClusterRole names Kueue's Workloads); any other owner, or one that
// cannot be read, ties no pod.
func ownerTies(ctx context.Context, reader client.Reader, pr *provv1.ProvisioningRequest) (pods sets.Set[types.UID], controller types.UID) {
	pods = sets.New[types.UID]()
	ref := metav1.GetControllerOf(pr)
	if ref == nil || reader == nil {
		return pods, ""
	}
	owner := &metav1.PartialObjectMetadata{}
	owner.APIVersion, owner.Kind = ref.APIVersion, ref.Kind
	if err := reader.Get(ctx, types.NamespacedName{Namespace: pr.Namespace, Name: ref.Name}, owner); err != nil || owner.UID != ref.UID {
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

// AlreadyCounted lowers each pod set's count by the request's existing
// pods that stand for one of its pods: a quota counts them as used
// already, and the request's pods are checked on top of what is used.
// A pod stands for a pod of a set when it uses at least what the set's pod
// uses, resource by resource, and every quota matches both or neither (a
// larger pod does not lower the count by more than one, so a tenant cannot
// shrink what its request is checked for by making one pod big). counted
// is how many pods were taken off.
func AlreadyCounted(quotas []*v1.ResourceQuota, want []Demand, existing []*v1.Pod) (out []Demand, counted int, err error) {
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
		if setUsage[i], err = podEvaluator.Usage(d.Pod); err != nil {
			return nil, 0, err
		}
		if setMatch[i], err = matches(quotas, d.Pod); err != nil {
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
			if out[i].Count == 0 || !slices.Equal(m, setMatch[i]) {
				continue
			}
			if Covers(u, setUsage[i]) {
				out[i].Count--
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

// Covers reports whether have is at least need in every resource of need
// (quotav1.LessThanOrEqual compares only the resources of its second list).
func Covers(have, need v1.ResourceList) bool {
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

// usage is what the demands that quota q matches count against it, with
// kube-apiserver's own pod usage and scope matching, computed once per
// demand.
func usage(q *v1.ResourceQuota, ds []Demand) (v1.ResourceList, error) {
	total := v1.ResourceList{}
	for _, d := range ds {
		ok, err := podEvaluator.Matches(q, d.Pod)
		if err != nil {
			return nil, fmt.Errorf("matching ResourceQuota %s: %w", q.Name, err)
		}
		if !ok {
			continue
		}
		u, err := podEvaluator.Usage(d.Pod)
		if err != nil {
			return nil, fmt.Errorf("usage of pod %s/%s for ResourceQuota %s: %w", d.Pod.Namespace, d.Pod.Name, q.Name, err)
		}
		for name, v := range u {
			n := d.Count
			if d.Pods > 0 && isPodCount(name) {
				n, v = 1, *resource.NewQuantity(d.Pods, resource.DecimalSI)
			}
			u[name] = times(v, n)
		}
		total = quotav1.Add(total, u)
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

// Check reports whether the namespace's ResourceQuotas can admit the pods
// wanted on top of what they already count as used and what the
// namespace's other bookings hold. The error (an *ExceededError) names
// each quota and resource that would be exceeded.
func Check(quotas []*v1.ResourceQuota, want, held []Demand) error {
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
		names := quotav1.ResourceNames(hard)
		total := quotav1.Add(quotav1.Add(quotav1.Mask(q.Status.Used, names), quotav1.Mask(booked, names)), quotav1.Mask(wanted, names))
		if ok, exceeded := quotav1.LessThanOrEqual(total, hard); !ok {
			sort.Slice(exceeded, func(i, j int) bool { return exceeded[i] < exceeded[j] })
			for _, r := range exceeded {
				used, h, add := q.Status.Used[r], hard[r], wanted[r]
				p := fmt.Sprintf("%s: %s requested %s, used %s", q.Name, r, show(add), show(used))
				if b, ok := booked[r]; ok && !b.IsZero() {
					p += fmt.Sprintf(", held by the namespace's other requests %s", show(b))
				}
				problems = append(problems, p+fmt.Sprintf(", limited %s", show(h)))
			}
		}
	}
	if len(problems) > 0 {
		return &ExceededError{msg: "exceeded quota: " + strings.Join(problems, "; ")}
	}
	return nil
}
