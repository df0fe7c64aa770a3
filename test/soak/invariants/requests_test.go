package invariants

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestRequestValidity(t *testing.T) {
	const ns = "team"
	// valid is a check-capacity request valid for two minutes: decided by
	// 12:02:00, with a minute of grace.
	valid := func() *wrappers.ProvisioningRequestWrapper {
		return request(ns, "req", "req-1", provv1.ClassCheckCapacity, 1).Parameter(provv1.ParameterValidUntilSeconds, "120")
	}
	atomic := func() *wrappers.ProvisioningRequestWrapper {
		return request(ns, "req", "req-1", provv1.ClassBestEffortAtomicScaleUp, 1).Parameter(provv1.ParameterValidUntilSeconds, "120")
	}
	cases := map[string]struct {
		cfg  func(*Config)
		at   time.Duration
		pr   *provv1.ProvisioningRequest
		want []want
	}{
		"provisioned within its validity": {
			at: 10 * time.Minute,
			pr: condition(valid(), provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, time.Minute).Obj(),
		},
		"failed at the end of the grace": {
			at: 10 * time.Minute,
			pr: condition(valid(), provv1.ConditionFailed, metav1.ConditionTrue, "ValidityExpired", 3*time.Minute).Obj(),
		},
		"undecided within the grace": {
			at: 3 * time.Minute,
			pr: valid().Obj(),
		},
		"undecided past the grace": {
			at: 3*time.Minute + time.Second,
			pr: condition(valid(), provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound, time.Minute).Obj(),
			want: []want{{InvariantValidity, []string{"ProvisioningRequest team/req (uid req-1) (class check-capacity.autoscaling.x-k8s.io), created at 2026-03-01T12:00:00Z with ValidUntilSeconds 120",
				"had until 2026-03-01T12:02:00Z", "1m0s of grace (until 2026-03-01T12:03:00Z)",
				"it is neither at 2026-03-01T12:03:01Z (Provisioned=False CapacityIsNotFound): 1s past the limit"}}},
		},
		"provisioned late": {
			at:   10 * time.Minute,
			pr:   condition(valid(), provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, 4*time.Minute).Obj(),
			want: []want{{InvariantValidity, []string{"it became Provisioned=True only at 2026-03-01T12:04:00Z (seen at 2026-03-01T12:10:00Z): 1m0s past the limit"}}},
		},
		"atomic scale-up within its provisioning timeout": {
			at: 8 * time.Minute,
			pr: atomic().Obj(),
		},
		"atomic scale-up past its provisioning timeout": {
			at:   8*time.Minute + time.Second,
			pr:   atomic().Obj(),
			want: []want{{InvariantValidity, []string{"6m0s of grace (until 2026-03-01T12:08:00Z)", "1s past the limit"}}},
		},
		"an invalid validity fails it at once": {
			at:   time.Minute + time.Second,
			pr:   request(ns, "req", "req-1", provv1.ClassCheckCapacity, 1).Parameter(provv1.ParameterValidUntilSeconds, "soon").Obj(),
			want: []want{{InvariantValidity, []string{`with ValidUntilSeconds "soon", which fails it at once`, "1s past the limit"}}},
		},
		"deleted within its validity": {
			at: 10 * time.Minute,
			pr: func() *provv1.ProvisioningRequest {
				pr := valid().Obj()
				pr.DeletionTimestamp = &metav1.Time{Time: at(time.Minute)}
				return pr
			}(),
		},
		"the default validity": {
			at: time.Hour,
			pr: request(ns, "req", "req-1", provv1.ClassCheckCapacity, 1).Obj(),
		},
		"a class's own validity": {
			cfg:  func(c *Config) { c.ClassValidUntil = map[string]time.Duration{"gpu": time.Minute} },
			at:   2*time.Minute + time.Second,
			pr:   request(ns, "req", "req-1", "gpu", 1).Obj(),
			want: []want{{InvariantValidity, []string{"with its class's validity 1m0s"}}},
		},
		"a class not checked": {
			cfg: func(c *Config) { c.Classes = []string{provv1.ClassBestEffortAtomicScaleUp} },
			at:  time.Hour,
			pr:  valid().Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			run(t, cfg, []step{{tc.at, []any{tc.pr}}}, tc.want)
		})
	}
}

func TestRequestServedOnce(t *testing.T) {
	const ns = "team"
	req := func(count int32) *wrappers.ProvisioningRequestWrapper {
		return request(ns, "req", "req-1", provv1.ClassCheckCapacity, count)
	}
	booking := func(name string, pods int, created time.Duration) *wrappers.ReservationWrapper {
		return booked(rsv(name, "1", created), "req-1", ns, "req", pods)
	}
	withAttempts := func(pr *wrappers.ProvisioningRequestWrapper, n string) *provv1.ProvisioningRequest {
		pr.Status.ProvisioningClassDetails = map[string]provv1.Detail{detailAttempts: provv1.Detail(n)}
		return pr.Obj()
	}
	cases := map[string]struct {
		steps []step
		want  []want
	}{
		"booked as many pods as asked": {
			steps: []step{
				{0, []any{req(3).Obj(), booking("r1", 2, 0).Available("n1").Obj(), booking("r2", 1, 0).Obj()}},
				{5 * time.Second, []any{req(3).Obj(), booking("r1", 2, 0).Available("n1").Obj(), booking("r2", 1, 0).Obj()}},
			},
		},
		"booked more pods than asked": {
			steps: []step{
				{0, []any{req(3).Obj(), booking("r1", 2, 0).Available("n1").Obj(), booking("r2", 2, 0).Obj()}},
				{5 * time.Second, []any{req(3).Obj(), booking("r1", 2, 0).Available("n1").Obj(), booking("r2", 2, 0).Obj()}},
			},
			want: []want{{InvariantBookedTwice, []string{"ProvisioningRequest team/req (uid req-1) asks for 3 pods but its 2 live Reservations book 4",
				"Reservation r1 (uid uid-r1), Reservation r2 (uid uid-r2)"}}},
		},
		"a lost booking booked again": {
			steps: []step{
				{0, []any{req(3).Obj(), ready(booking("r1", 2, 0).Phase(schedv1alpha1.ReservationFailed), metav1.ConditionFalse, schedv1alpha1.ReasonNodeDeleted, 0).Obj(),
					booking("r1-again", 2, 0).Obj(), booking("r2", 1, 0).Available("n1").Obj()}},
				{5 * time.Second, []any{req(3).Obj(), ready(booking("r1", 2, 0).Phase(schedv1alpha1.ReservationFailed), metav1.ConditionFalse, schedv1alpha1.ReasonNodeDeleted, 0).Obj(),
					booking("r1-again", 2, 0).Obj(), booking("r2", 1, 0).Available("n1").Obj()}},
			},
		},
		"booked after it ended": {
			steps: []step{{70 * time.Second, []any{condition(req(1), provv1.ConditionFailed, metav1.ConditionTrue, "ValidityExpired", time.Minute).Obj(),
				booking("r1", 1, 65*time.Second).Obj()}}},
			want: []want{{InvariantBookedAfterEnd, []string{"Reservation r1 (uid uid-r1) was created at 2026-03-01T12:01:05Z for ProvisioningRequest team/req (uid req-1), which had ended at 2026-03-01T12:01:00Z (Failed=True, reason ValidityExpired)"}}},
		},
		"booked in the second it ended": {
			steps: []step{{70 * time.Second, []any{condition(req(1), provv1.ConditionFailed, metav1.ConditionTrue, "ValidityExpired", time.Minute).Obj(),
				booking("r1", 1, time.Minute).Obj()}}},
		},
		"provisioned after it ended": {
			steps: []step{{3 * time.Minute, []any{condition(condition(req(1),
				provv1.ConditionBookingExpired, metav1.ConditionTrue, "BookingExpired", time.Minute),
				provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, 2*time.Minute).Obj()}}},
			want: []want{{InvariantRevived, []string{"became Provisioned=True at 2026-03-01T12:02:00Z (reason CapacityIsFound), after it had ended at 2026-03-01T12:01:00Z (BookingExpired=True, reason BookingExpired)"}}},
		},
		"no longer ended": {
			steps: []step{
				{2 * time.Minute, []any{condition(req(1), provv1.ConditionFailed, metav1.ConditionTrue, "ValidityExpired", time.Minute).Obj()}},
				{3 * time.Minute, []any{condition(req(1), provv1.ConditionFailed, metav1.ConditionFalse, "ValidityExpired", 150*time.Second).Obj()}},
			},
			want: []want{{InvariantRevived, []string{"had ended at 2026-03-01T12:01:00Z (Failed=True, reason ValidityExpired) and is no longer ended at 2026-03-01T12:03:00Z (Failed=False ValidityExpired)"}}},
		},
		"a failed attempt released before the next": {
			steps: []step{
				{0, []any{req(1).Obj(), booking("r1", 1, 0).Obj()}},
				{10 * time.Second, []any{withAttempts(req(1), "1"), withUID(booking("r1", 1, 10*time.Second).Obj(), "uid-r1-next")}},
				{15 * time.Second, []any{withAttempts(req(1), "1"), withUID(booking("r1", 1, 10*time.Second).Obj(), "uid-r1-next")}},
			},
		},
		"a failed attempt's booking left behind": {
			steps: []step{
				{0, []any{req(1).Obj(), booking("r1", 1, 0).Obj()}},
				{10 * time.Second, []any{withAttempts(req(1), "1"), booking("r1", 1, 0).Obj()}},
				{14 * time.Second, []any{withAttempts(req(1), "1"), booking("r1", 1, 0).Obj()}},
				{15 * time.Second, []any{withAttempts(req(1), "1"), booking("r1", 1, 0).Obj()}},
			},
			want: []want{{InvariantAttemptsOverlap, []string{"Reservation r1 (uid uid-r1) (Pending) of ProvisioningRequest team/req (uid req-1) was booked by attempt 1, which failed (the request's count of failed attempts rose to 1 by 2026-03-01T12:00:10Z)"}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run(t, DefaultConfig(), tc.steps, tc.want)
		})
	}
}

func TestRequestEndsWithItsBooking(t *testing.T) {
	const ns = "team"
	provisioned := condition(request(ns, "req", "req-1", provv1.ClassCheckCapacity, 1),
		provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, 30*time.Second).Obj()
	bookingObj := booked(rsv("r1", "1", 0).TTL(10*time.Minute), "req-1", ns, "req", 1).Available("n1").Obj()
	cases := map[string]struct {
		steps []step
		want  []want
	}{
		"within the lag after its booking expired": {
			steps: []step{{time.Minute, []any{provisioned, bookingObj}}, {11 * time.Minute, []any{provisioned}}},
		},
		"past the lag after its booking expired": {
			steps: []step{{time.Minute, []any{provisioned, bookingObj}}, {11*time.Minute + time.Second, []any{provisioned}}},
			want: []want{{InvariantStillProvisioned, []string{"ProvisioningRequest team/req (uid req-1) is still Provisioned and not ended at 2026-03-01T12:11:01Z",
				"its booking ended at 2026-03-01T12:10:00Z", "should have ended (BookingExpired or CapacityBookingConsumed) by 2026-03-01T12:11:00Z: 1s past the limit"}}},
		},
		"no booking seen": {
			steps: []step{{time.Hour, []any{provisioned}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run(t, DefaultConfig(), tc.steps, tc.want)
		})
	}
}
