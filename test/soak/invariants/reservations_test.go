package invariants

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

func TestReservationLifetime(t *testing.T) {
	const ns = "team"
	liveReq := request(ns, "req", "req-1", provv1.ClassCheckCapacity, 1)
	endedReq := condition(request(ns, "req", "req-1", provv1.ClassCheckCapacity, 1),
		provv1.ConditionBookingExpired, metav1.ConditionTrue, "BookingExpired", 0)
	sameName := request(ns, "req", "req-2", provv1.ClassCheckCapacity, 1)
	cases := map[string]struct {
		cfg   func(*Config)
		steps []step
		want  []want
	}{
		"available within its ttl and the lag": {
			steps: []step{{5*time.Minute + 30*time.Second, []any{node("n1", "4"), rsv("r1", "1", 0).TTL(5 * time.Minute).Available("n1").Obj()}}},
		},
		"available past its ttl and the lag": {
			steps: []step{{5*time.Minute + 31*time.Second, []any{node("n1", "4"), rsv("r1", "1", 0).TTL(5 * time.Minute).Available("n1").Obj()}}},
			want: []want{{InvariantExpired, []string{"Reservation r1 (uid uid-r1) is still Available at 2026-03-01T12:05:31Z",
				"expired at 2026-03-01T12:05:00Z (ttl 5m0s from its creation at 2026-03-01T12:00:00Z)", "had until 2026-03-01T12:05:30Z", "1s past the limit"}}},
		},
		"pending past its expires": {
			steps: []step{{2 * time.Minute, []any{func() any {
				r := rsv("r1", "1", 0)
				r.Spec.Expires = &metav1.Time{Time: at(time.Minute)}
				return r.Obj()
			}()}}},
			want: []want{{InvariantExpired, []string{"is still Pending", "(expires 2026-03-01T12:01:00Z)", "30s past the limit"}}},
		},
		"failed at its expiry": {
			steps: []step{{6 * time.Minute, []any{ready(rsv("r1", "1", 0).TTL(5*time.Minute).Phase(schedv1alpha1.ReservationFailed),
				metav1.ConditionFalse, schedv1alpha1.ReasonExpired, 5*time.Minute).Obj()}}},
		},
		"node gone within the lag": {
			steps: []step{
				{0, []any{rsv("r1", "1", 0).Available("n9").Obj()}},
				{30 * time.Second, []any{rsv("r1", "1", 0).Available("n9").Obj()}},
			},
		},
		"node gone past the lag": {
			steps: []step{
				{0, []any{rsv("r1", "1", 0).Available("n9").Obj()}},
				{31 * time.Second, []any{rsv("r1", "1", 0).Available("n9").Obj()}},
			},
			want: []want{{InvariantNodeGone, []string{"Reservation r1 (uid uid-r1) is still Available on Node n9", "gone since 2026-03-01T12:00:00Z", "1s past the limit"}}},
		},
		"consumed and succeeded": {
			steps: []step{{time.Minute, []any{node("n1", "4"),
				ready(rsv("r1", "1", 0).Available("n1").Phase(schedv1alpha1.ReservationSucceeded).OwnerPod(ns, "p").
					CurrentOwner(owner(pod(ns, "p", "1", "n1").Obj())), metav1.ConditionFalse, schedv1alpha1.ReasonAllocated, 30*time.Second).Obj(),
				placedIn(pod(ns, "p", "1", "n1"), rsv("r1", "1", 0).Obj()).Obj()}}},
		},
		"consumed by a pod that finished unrecorded, still available": {
			steps: []step{
				{0, []any{node("n1", "4"), rsv("r1", "1", 0).Available("n1").OwnerPod(ns, "p").Obj(),
					placedIn(pod(ns, "p", "1", "n1").Phase(v1.PodSucceeded), rsv("r1", "1", 0).Obj()).Obj()}},
				{31 * time.Second, []any{node("n1", "4"), rsv("r1", "1", 0).Available("n1").OwnerPod(ns, "p").Obj(),
					placedIn(pod(ns, "p", "1", "n1").Phase(v1.PodSucceeded), rsv("r1", "1", 0).Obj()).Obj()}},
			},
			want: []want{{InvariantNotSucceeded, []string{"Reservation r1 (uid uid-r1) is allocate-once and Pod team/p (uid uid-p) was placed in it",
				"still Available at 2026-03-01T12:00:31Z", "1s past the limit"}}},
		},
		"booking of a live request": {
			steps: []step{
				{0, []any{liveReq.Obj(), booked(rsv("r1", "1", 0), "req-1", ns, "req", 1).Obj()}},
				{time.Minute, []any{liveReq.Obj(), booked(rsv("r1", "1", 0), "req-1", ns, "req", 1).Obj()}},
			},
		},
		"booking of a request that ended within the lag": {
			steps: []step{{30 * time.Second, []any{endedReq.Obj(), booked(rsv("r1", "1", 0), "req-1", ns, "req", 1).Obj()}}},
		},
		"booking of a request that ended past the lag": {
			steps: []step{{31 * time.Second, []any{endedReq.Obj(), booked(rsv("r1", "1", 0), "req-1", ns, "req", 1).Obj()}}},
			want: []want{{InvariantOutlivesRequest, []string{"Reservation r1 (uid uid-r1) (Pending) still exists at 2026-03-01T12:00:31Z",
				"booked for ProvisioningRequest team/req (uid req-1), which ended at 2026-03-01T12:00:00Z (BookingExpired=True, reason BookingExpired)",
				"1s past the limit"}}},
		},
		"booking of an earlier request of the same name": {
			steps: []step{
				{0, []any{sameName.Obj(), booked(rsv("r1", "1", 0), "req-1", ns, "req", 1).Obj()}},
				{31 * time.Second, []any{sameName.Obj(), booked(rsv("r1", "1", 0), "req-1", ns, "req", 1).Obj()}},
			},
			want: []want{{InvariantOutlivesRequest, []string{"ProvisioningRequest team/req (uid req-1), which has been gone since 2026-03-01T12:00:00Z, as first seen; a request of the same name has uid req-2, whose pods may consume this booking"}}},
		},
		"terminal within terminalReservationTTL": {
			steps: []step{{10*time.Minute + 30*time.Second, []any{ready(rsv("r1", "1", 0).Phase(schedv1alpha1.ReservationFailed),
				metav1.ConditionFalse, schedv1alpha1.ReasonPreempted, 0).Obj()}}},
		},
		"terminal past terminalReservationTTL": {
			steps: []step{{10*time.Minute + 31*time.Second, []any{ready(rsv("r1", "1", 0).Phase(schedv1alpha1.ReservationFailed),
				metav1.ConditionFalse, schedv1alpha1.ReasonPreempted, 0).Obj()}}},
			want: []want{{InvariantTerminalKept, []string{"Reservation r1 (uid uid-r1) has been Failed since 2026-03-01T12:00:00Z", "deleted after 10m0s", "1s past the limit"}}},
		},
		"terminal kept when its ttl is not checked": {
			cfg: func(c *Config) { c.TerminalReservationTTL = -1 },
			steps: []step{{time.Hour, []any{ready(rsv("r1", "1", 0).Phase(schedv1alpha1.ReservationFailed),
				metav1.ConditionFalse, schedv1alpha1.ReasonPreempted, 0).Obj()}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			run(t, cfg, tc.steps, tc.want)
		})
	}
}

func TestReservationCapacity(t *testing.T) {
	const ns = "team"
	// twice is the same objects at t0 and Skew later.
	twice := func(objs ...any) []step { return []step{{0, objs}, {5 * time.Second, objs}} }
	shared := rsv("r1", "4", 0).Available("n1").AllocateOnce(false).OwnerLabels(ns, map[string]string{"app": "w"}).Obj()
	once := rsv("r1", "2", 0).Available("n1").OwnerLabels(ns, map[string]string{"app": "w"}).Obj()
	cases := map[string]struct {
		steps []step
		want  []want
	}{
		"pods and a reservation fit": {
			steps: twice(node("n1", "4"), pod(ns, "a", "2", "n1").Obj(), rsv("r1", "2", 0).Available("n1").Obj()),
		},
		"pods and a reservation over allocatable": {
			steps: twice(node("n1", "4"), pod(ns, "a", "3", "n1").Obj(), rsv("r1", "2", 0).Available("n1").Obj()),
			want: []want{{InvariantOverbooked, []string{"Node n1 has cpu 5 booked against 4 allocatable (1 over)",
				"Pod team/a (uid uid-a) requests 3", "Reservation r1 (uid uid-r1) holds 2", "first seen at 2026-03-01T12:00:00Z, still at 2026-03-01T12:00:05Z"}}},
		},
		"over allocatable in one snapshot only": {
			steps: []step{{0, []any{node("n1", "4"), pod(ns, "a", "3", "n1").Obj(), rsv("r1", "2", 0).Available("n1").Obj()}}},
		},
		"an allocate-once reservation releases what its owner did not take": {
			steps: twice(node("n1", "3"), once, pod(ns, "a", "2", "n1").Obj(),
				placedIn(pod(ns, "b", "1", "n1").Label("app", "w"), once).Obj()),
		},
		"a shared reservation holds what its owners did not take": {
			steps: twice(node("n1", "4"), shared, placedIn(pod(ns, "b", "1", "n1").Label("app", "w"), shared).Obj()),
		},
		"an allocation annotation on a pod that is no owner places nothing": {
			steps: twice(node("n1", "4"), shared, placedIn(pod(ns, "c", "1", "n1"), shared).Obj()),
			want:  []want{{InvariantOverbooked, []string{"cpu 5 booked against 4 allocatable", "Pod team/c (uid uid-c) requests 1", "Reservation r1 (uid uid-r1) holds 4"}}},
		},
		"finished pods hold nothing": {
			steps: twice(node("n1", "4"), pod(ns, "a", "3", "n1").Phase(v1.PodSucceeded).Obj(), rsv("r1", "2", 0).Available("n1").Obj()),
		},
		"a pod recorded in two reservations": {
			steps: twice(node("n1", "4"),
				ready(rsv("r1", "1", 0).Available("n1").Phase(schedv1alpha1.ReservationSucceeded).CurrentOwner(owner(pod(ns, "p", "1", "n1").Obj())),
					metav1.ConditionFalse, schedv1alpha1.ReasonAllocated, 0).Obj(),
				ready(rsv("r2", "1", 0).Available("n1").Phase(schedv1alpha1.ReservationSucceeded).CurrentOwner(owner(pod(ns, "p", "1", "n1").Obj())),
					metav1.ConditionFalse, schedv1alpha1.ReasonAllocated, 0).Obj(),
				pod(ns, "p", "1", "n1").Obj()),
			want: []want{{InvariantPodInTwo, []string{"Pod team/p (uid uid-p) is allocated to 2 Reservations at once", "Reservation r1 (uid uid-r1), Reservation r2 (uid uid-r2)"}}},
		},
		"an allocate-once reservation with two owners": {
			steps: twice(node("n1", "4"),
				rsv("r1", "2", 0).Available("n1").OwnerLabels(ns, map[string]string{"app": "w"}).CurrentOwner(owner(pod(ns, "p1", "1", "n1").Obj())).Obj(),
				placedIn(pod(ns, "p2", "1", "n1").Label("app", "w"), rsv("r1", "2", 0).Obj()).Obj()),
			want: []want{{InvariantOverAllocated, []string{"Reservation r1 (uid uid-r1) (Available) holds more than it allows",
				"allocate-once but 2 owners were placed in it: Pod team/p1 (uid uid-p1), Pod team/p2 (uid uid-p2)"}}},
		},
		"allocated above what it holds": {
			steps: twice(node("n1", "4"), rsv("r1", "2", 0).Available("n1").AllocateOnce(false).Allocated("cpu", "3", "memory", "1Gi").Obj()),
			want:  []want{{InvariantOverAllocated, []string{"status.allocated records cpu 3 of the 2 it holds, memory 1Gi, which it does not hold"}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run(t, DefaultConfig(), tc.steps, tc.want)
		})
	}
}

func TestCheckerReportsOnce(t *testing.T) {
	expiring := func(p schedv1alpha1.ReservationPhase) any {
		return rsv("r1", "1", 0).TTL(time.Minute).Available("n1").Phase(p).Obj()
	}
	c := NewChecker(DefaultConfig())
	for i, s := range []struct {
		step
		want int
	}{
		{step{2 * time.Minute, []any{node("n1", "4"), expiring(schedv1alpha1.ReservationAvailable)}}, 1},
		{step{3 * time.Minute, []any{node("n1", "4"), expiring(schedv1alpha1.ReservationAvailable)}}, 0},
		{step{4 * time.Minute, []any{node("n1", "4"), expiring(schedv1alpha1.ReservationAvailable)}}, 0},
		// Failed: the violation is over; Available again, it is reported again.
		{step{5 * time.Minute, []any{node("n1", "4"), expiring(schedv1alpha1.ReservationFailed)}}, 0},
		{step{6 * time.Minute, []any{node("n1", "4"), expiring(schedv1alpha1.ReservationAvailable)}}, 1},
	} {
		got := c.Check(snapshot(s.step))
		if len(got) != s.want {
			t.Errorf("snapshot %d: %d violations, want %d:\n%s", i, len(got), s.want, describe(got))
		}
		for _, v := range got {
			if v.Invariant != InvariantExpired || v.Since != at(time.Minute) || v.Seen != at(s.at) || v.Over() != s.at-time.Minute-30*time.Second {
				t.Errorf("snapshot %d: got %+v, want Expired since %s, seen %s", i, v, at(time.Minute), at(s.at))
			}
		}
	}
	if got := len(c.Violations()); got != 2 {
		t.Errorf("%d violations reported in all, want 2", got)
	}
	// Each Available snapshot judged the reservation's expiry, its node,
	// its consumption and its allocation, and the node's cpu (5); the
	// Failed one its terminal age and its allocation (2).
	if got := c.Checks()[FamilyReservation]; got != 22 {
		t.Errorf("%d Reservation checks made, want 22 (%s)", got, c.Checks())
	}
	if got, want := c.Checks().String(), "22 invariant checks made (Reservation 22, Quota 0, ProvisioningRequest 0, ScaleDown 0, Preemption 0, MetadataPolicy 0, Leak 0)"; got != want {
		t.Errorf("checks say %q, want %q", got, want)
	}
}
