package invariants

import (
	"fmt"
	"math/big"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gantry-dev/gantry/autoscaler/provisioning/quota"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/plugins/reservation"
)

// InvariantQuotaExceeded: a namespace's pods and bookings together use
// more of a resource than one of its ResourceQuotas allows.
const InvariantQuotaExceeded = "QuotaExceeded"

// heldBooking is what one Reservation of a booking holds for its
// namespace: room for pods of its request that have not come.
type heldBooking struct {
	r         *schedv1alpha1.Reservation
	namespace string
	request   string
	pods      int
	requests  v1.ResourceList
	// perPod is what the Reservation books for each of its pods.
	perPod v1.ResourceList
}

// checkQuotas judges each ResourceQuota: what the namespace's pods use, as
// kube-apiserver's quota evaluator counts it, plus what the namespace's
// live bookings hold for pods that have not come, stays within hard.
func (c *Checker) checkQuotas(ix *index) []Violation {
	if len(ix.s.ResourceQuotas) == 0 {
		return nil
	}
	// The evaluator's clock decides whether a pod stuck terminating past
	// its grace period still counts (core.QuotaV1Pod).
	ev := core.NewPodEvaluator(nil, testingclock.NewFakeClock(ix.now))
	helds := c.heldBookings(ix)
	var out []Violation
	for _, q := range ix.s.ResourceQuotas {
		out = append(out, c.checkQuota(ix, ev, withHard(q), helds[q.Namespace])...)
	}
	return out
}

// withHard is q with its status.hard, which the quota controller copies
// from spec.hard; a quota it has not synced yet limits as its spec says
// (as the provisioner reads it, autoscaler/provisioning/quota withHard).
func withHard(q *v1.ResourceQuota) *v1.ResourceQuota {
	if len(q.Status.Hard) == 0 {
		q = q.DeepCopy()
		q.Status.Hard = q.Spec.Hard
	}
	return q
}

func (c *Checker) checkQuota(ix *index, ev quotav1.Evaluator, q *v1.ResourceQuota, helds []*heldBooking) []Violation {
	hard := q.Status.Hard
	names := sortedNames(hard)
	used, booked := v1.ResourceList{}, v1.ResourceList{}
	var pods []*v1.Pod
	for _, p := range ix.podsByNS[q.Namespace] {
		ok, err := ev.Matches(q, p)
		if err != nil || !ok {
			continue
		}
		u, err := ev.Usage(p)
		if err != nil {
			continue
		}
		pods = append(pods, p)
		addTo(used, quotav1.Mask(u, names))
	}
	var bookings []*heldBooking
	bookedOf := map[types.UID]v1.ResourceList{}
	for _, h := range helds {
		// A booking carries requests only: quota scopes judge it as a pod
		// with those requests and no priority class or deadline
		// (autoscaler/provisioning/quota Held).
		stand := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: h.namespace, Name: h.r.Name},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "booked",
				Resources: v1.ResourceRequirements{Requests: h.requests}}}},
		}
		ok, err := ev.Matches(q, stand)
		if err != nil || !ok {
			continue
		}
		u, err := ev.Usage(stand)
		if err != nil {
			continue
		}
		for name := range u {
			if name == v1.ResourcePods || name == "count/pods" {
				u[name] = *resource.NewQuantity(int64(h.pods), resource.DecimalSI)
			}
		}
		u = quotav1.Mask(u, names)
		bookings = append(bookings, h)
		bookedOf[h.r.UID] = u
		addTo(booked, u)
	}
	var out []Violation
	for _, name := range names {
		c.checks[FamilyQuota]++
		limit := hard[name]
		total := used[name].DeepCopy()
		total.Add(booked[name])
		if total.Cmp(limit) <= 0 {
			continue
		}
		key := q.Namespace + "/" + q.Name + "/" + string(name)
		since, ok := c.persisted("quota/"+key, ix.now)
		if !ok {
			continue
		}
		objs := []ObjectRef{{Kind: "ResourceQuota", Namespace: q.Namespace, Name: q.Name, UID: q.UID}}
		var holders []string
		for _, h := range bookings {
			if b := bookedOf[h.r.UID][name]; !b.IsZero() {
				objs = append(objs, reservationRef(h.r))
				holders = append(holders, fmt.Sprintf("%s holds %s for %s of ProvisioningRequest %s/%s", reservationRef(h.r), b.String(), count(h.pods, "pod"), h.namespace, h.request))
			}
		}
		counted := 0
		for _, p := range pods {
			if u, err := ev.Usage(p); err == nil && nonZero(u, name) {
				counted++
				if counted <= 20 {
					objs = append(objs, podRef(p))
				}
			}
		}
		excess := total.DeepCopy()
		excess.Sub(limit)
		msg := fmt.Sprintf("%s's %s is at %s, above its hard %s by %s: %s used by %s of namespace %s",
			objs[0], name, total.String(), limit.String(), excess.String(), quantity(used[name]), count(counted, "pod"), q.Namespace)
		if len(holders) > 12 {
			holders = append(holders[:12], fmt.Sprintf("and %d more", len(holders)-12))
		}
		if len(holders) > 0 {
			msg += fmt.Sprintf(" and %s held by bookings not consumed yet (%s)", quantity(booked[name]), strings.Join(holders, "; "))
		}
		msg += fmt.Sprintf("; first seen at %s, still at %s", stamp(since), stamp(ix.now))
		out = append(out, c.report(key, Violation{
			Family: FamilyQuota, Invariant: InvariantQuotaExceeded, Objects: objs, Since: since, Seen: ix.now, Message: msg,
		})...)
	}
	return out
}

func quantity(q resource.Quantity) string {
	if q.IsZero() {
		return "0"
	}
	return q.String()
}

// heldBookings are, by namespace, what the live bookings hold for pods of
// their requests that have not come yet, as the provisioner counts them
// against quota (autoscaler/provisioning/booking.go heldBookings, cameTo in
// came.go): a Pending one its whole template for all its booked pods; an
// Available one its template less status.allocated, capped to the share of
// the pods not come, where a pod has come once it is recorded in
// status.currentOwners or bound into it (consume annotation naming the
// request, on its node, allocation annotation naming it). Then each pod of
// the namespace that consumes the request and holds quota of its own but
// did not come to the booking stands for one booked pod (a pending pod
// not being deleted, as the provisioner's ExistingConsumers; or one bound
// outside the booking, created after the request, as cameElsewhere): its
// pod and its room are one demand, not two (docs/security.md N4).
func (c *Checker) heldBookings(ix *index) map[string][]*heldBooking {
	byRequest := map[string][]*heldBooking{}
	own := map[string]map[types.UID]bool{}
	for _, r := range ix.s.Reservations {
		_, ns, name, ok := bookingOf(r)
		if !ok {
			continue
		}
		// The request's own: its Reservations, in any phase, and the
		// owners they record (provisioning cameElsewhere).
		key := ns + "/" + name
		if own[key] == nil {
			own[key] = map[types.UID]bool{}
		}
		own[key][r.UID] = true
		for _, o := range r.Status.CurrentOwners {
			own[key][o.UID] = true
		}
		if !live(r) {
			continue
		}
		booked := bookedPods(r)
		h := &heldBooking{r: r, namespace: ns, request: name, pods: booked,
			requests: r.Spec.Template.Requests, perPod: share(r.Spec.Template.Requests, 1, booked)}
		if phase(r) == schedv1alpha1.ReservationAvailable {
			h.pods = booked - min(came(ix, r, ns, name), booked)
			h.requests = capToShare(reservation.Subtract(r.Spec.Template.Requests, r.Status.Allocated), r.Spec.Template.Requests, h.pods, booked)
		}
		if h.pods > 0 {
			byRequest[key] = append(byRequest[key], h)
		}
	}
	for key := range own {
		delete(own[key], "")
	}
	for key, hs := range byRequest {
		sort.Slice(hs, func(i, j int) bool { return hs[i].r.Name < hs[j].r.Name })
		ns, name, _ := strings.Cut(key, "/")
		pr := ix.byKey[key]
		var standIns []*v1.Pod
		for _, p := range ix.podsByNS[ns] {
			if consumes(p) != name || terminalPod(p) {
				continue
			}
			switch {
			case p.Spec.NodeName == "" && p.DeletionTimestamp == nil:
			case p.Spec.NodeName != "" && !own[key][p.UID] && !own[key][allocatedTo(p)] && pr != nil && !p.CreationTimestamp.Before(&pr.CreationTimestamp):
			default:
				continue
			}
			standIns = append(standIns, p)
		}
		sort.Slice(standIns, func(i, j int) bool { return standIns[i].Name < standIns[j].Name })
		for _, p := range standIns {
			req := podRequests(p)
			for _, h := range hs {
				if h.pods > 0 && quota.Covers(req, h.perPod) {
					h.pods--
					h.requests = reservation.Subtract(h.requests, h.perPod)
					break
				}
			}
		}
	}
	out := map[string][]*heldBooking{}
	for _, hs := range byRequest {
		for _, h := range hs {
			if h.pods > 0 {
				out[h.namespace] = append(out[h.namespace], h)
			}
		}
	}
	return out
}

// came counts the booked pods of r that came (provisioning cameTo).
func came(ix *index, r *schedv1alpha1.Reservation, ns, name string) int {
	uids := map[types.UID]bool{}
	for _, o := range r.Status.CurrentOwners {
		uids[o.UID] = true
	}
	if r.Status.NodeName != "" {
		for _, p := range ix.allocated[r.UID] {
			if p.Namespace == ns && p.Spec.NodeName == r.Status.NodeName && consumes(p) == name {
				uids[p.UID] = true
			}
		}
	}
	return len(uids)
}

// share is n/total of each quantity of all, rounded down to a milli-unit
// (in big integers: a node's memory in milli-bytes times a pod count passes
// int64).
func share(all v1.ResourceList, n, total int) v1.ResourceList {
	out := make(v1.ResourceList, len(all))
	for name, a := range all {
		m := new(big.Int).Mul(big.NewInt(a.MilliValue()), big.NewInt(int64(max(n, 0))))
		m.Quo(m, big.NewInt(int64(total)))
		out[name] = *resource.NewMilliQuantity(m.Int64(), a.Format)
	}
	return out
}

// capToShare caps each quantity of held at n/total of all
// (provisioning capToShare).
func capToShare(held, all v1.ResourceList, n, total int) v1.ResourceList {
	out := make(v1.ResourceList, len(held))
	s := share(all, n, total)
	for name, q := range held {
		if c := s[name]; c.Cmp(q) < 0 {
			q = c
		}
		if !q.IsZero() {
			out[name] = q
		}
	}
	return out
}

func nonZero(l v1.ResourceList, name v1.ResourceName) bool {
	q, ok := l[name]
	return ok && !q.IsZero()
}
