package invariants

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// resourceQuota is ResourceQuota q of ns, synced: status.hard is spec.hard.
func resourceQuota(ns string, hard ...string) *v1.ResourceQuota {
	q := &v1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: ns, UID: types.UID("uid-q")},
		Spec:       v1.ResourceQuotaSpec{Hard: wrappers.ResourceList(hard...)},
	}
	q.Status.Hard = q.Spec.Hard
	return q
}

func TestQuota(t *testing.T) {
	const ns = "team"
	twice := func(objs ...any) []step { return []step{{0, objs}, {5 * time.Second, objs}} }
	consumer := func(name, cpu, node string) *wrappers.PodWrapper {
		p := pod(ns, name, cpu, node).Annotation(provv1.AnnotationConsume, "req")
		p.CreationTimestamp = mtime(time.Second)
		return p
	}
	req := request(ns, "req", "req-1", provv1.ClassCheckCapacity, 2).Obj()
	pendingBooking := booked(rsv("r1", "2", 0), "req-1", ns, "req", 2).Obj()
	sharedBooking := func() *wrappers.ReservationWrapper {
		return booked(rsv("r1", "2", 0).Available("n1"), "req-1", ns, "req", 2)
	}
	cases := map[string]struct {
		steps []step
		want  []want
	}{
		"pods within hard": {
			steps: twice(resourceQuota(ns, "requests.cpu", "4"), pod(ns, "a", "2", "n1").Obj(), pod(ns, "b", "1", "").Obj()),
		},
		"pods and a pending booking over hard": {
			steps: twice(resourceQuota(ns, "requests.cpu", "3"), req, pendingBooking, pod(ns, "a", "2", "n1").Obj()),
			want: []want{{InvariantQuotaExceeded, []string{"ResourceQuota team/q (uid uid-q)'s requests.cpu is at 4, above its hard 3 by 1",
				"2 used by 1 pod of namespace team", "Reservation r1 (uid uid-r1) holds 2 for 2 pods of ProvisioningRequest team/req",
				"first seen at 2026-03-01T12:00:00Z, still at 2026-03-01T12:00:05Z"}}},
		},
		"over hard in one snapshot only": {
			steps: []step{{0, []any{resourceQuota(ns, "requests.cpu", "3"), req, pendingBooking, pod(ns, "a", "2", "n1").Obj()}}},
		},
		"cpu, the short name of requests.cpu": {
			steps: twice(resourceQuota(ns, "cpu", "3"), req, pendingBooking, pod(ns, "a", "2", "n1").Obj()),
			want:  []want{{InvariantQuotaExceeded, []string{"'s cpu is at 4, above its hard 3 by 1"}}},
		},
		"booked pods count as pods": {
			steps: twice(resourceQuota(ns, "pods", "2"), req, pendingBooking, pod(ns, "a", "2", "n1").Obj()),
			want:  []want{{InvariantQuotaExceeded, []string{"'s pods is at 3, above its hard 2 by 1", "holds 2 for 2 pods"}}},
		},
		"what a recorded owner took is not held again": {
			steps: twice(resourceQuota(ns, "requests.cpu", "2"), req,
				sharedBooking().CurrentOwner(owner(consumer("p1", "1", "n1").Obj())).Allocated("cpu", "1").Obj(),
				placedIn(consumer("p1", "1", "n1"), sharedBooking().Obj()).Obj()),
		},
		"a pod bound into the booking but not recorded is not held again": {
			steps: twice(resourceQuota(ns, "requests.cpu", "2"), req, sharedBooking().Obj(),
				placedIn(consumer("p1", "1", "n1"), sharedBooking().Obj()).Obj()),
		},
		"a pending consumer stands for a booked pod": {
			steps: twice(resourceQuota(ns, "requests.cpu", "2"), req, pendingBooking, consumer("p1", "1", "").Obj()),
		},
		"a consumer bound outside the booking stands for a booked pod": {
			steps: twice(resourceQuota(ns, "requests.cpu", "2"), req, pendingBooking, consumer("p1", "1", "n2").Obj()),
		},
		"a smaller consumer stands for none": {
			steps: twice(resourceQuota(ns, "requests.cpu", "2"), req, pendingBooking, consumer("p1", "500m", "").Obj()),
			want:  []want{{InvariantQuotaExceeded, []string{"'s requests.cpu is at 2500m, above its hard 2 by 500m", "holds 2 for 2 pods"}}},
		},
		"an ended booking holds nothing": {
			steps: twice(resourceQuota(ns, "requests.cpu", "2"), req, pod(ns, "a", "2", "n1").Obj(),
				booked(rsv("r1", "2", 0), "req-1", ns, "req", 2).Phase(schedv1alpha1.ReservationFailed).Obj()),
		},
		"finished pods use no cpu": {
			steps: twice(resourceQuota(ns, "requests.cpu", "2"), pod(ns, "a", "2", "n1").Phase(v1.PodSucceeded).Obj(), pod(ns, "b", "2", "n1").Obj()),
		},
		"finished pods still count in count/pods": {
			steps: twice(resourceQuota(ns, "count/pods", "1"), pod(ns, "a", "2", "n1").Phase(v1.PodSucceeded).Obj(), pod(ns, "b", "2", "n1").Obj()),
			want:  []want{{InvariantQuotaExceeded, []string{"'s count/pods is at 2, above its hard 1 by 1", "2 used by 2 pods"}}},
		},
		"a BestEffort quota does not count pods with requests": {
			steps: twice(func() any {
				q := resourceQuota(ns, "pods", "1")
				q.Spec.Scopes = []v1.ResourceQuotaScope{v1.ResourceQuotaScopeBestEffort}
				return q
			}(), pod(ns, "a", "1", "n1").Obj(), pod(ns, "b", "1", "n1").Obj()),
		},
		"a quota not synced yet limits as its spec says": {
			steps: twice(func() any {
				q := resourceQuota(ns, "requests.cpu", "1")
				q.Status.Hard = nil
				return q
			}(), pod(ns, "a", "2", "n1").Obj()),
			want: []want{{InvariantQuotaExceeded, []string{"'s requests.cpu is at 2, above its hard 1 by 1"}}},
		},
		"another namespace's pods and bookings": {
			steps: twice(resourceQuota(ns, "requests.cpu", "1"), pod("other", "a", "2", "n1").Obj(),
				booked(rsv("r2", "2", 0), "req-9", "other", "req", 1).Obj()),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run(t, DefaultConfig(), tc.steps, tc.want)
		})
	}
}
