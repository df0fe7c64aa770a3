package provisioning

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// request is one ProvisioningRequest being served, with what serve has
// read about it: every step of its lifecycle takes it. Its methods read
// and change what is recorded on the request (conditions, the details in
// status.provisioningClassDetails, annotations), in memory only: the
// Reconciler writes the object (writeStatus, writeMetadata).
type request struct {
	pr *provv1.ProvisioningRequest
	// class serves the request; zero until the class is resolved.
	class Class
	// params are the request's parameters over the class's defaults; zero
	// when they could not be read (the request then fails).
	params Parameters
	// deadline is the end of the request's validity window.
	deadline time.Time
	// sets are the request's pod sets as pods; nil until they are read.
	sets []simulator.PodSet
	// onWritten are events to record once the status is written: those of
	// conditions set in memory and carried by the next status write.
	onWritten []requestEvent
}

// requestEvent is an event about the request.
type requestEvent struct{ typ, reason, msg string }

// newRequest is pr being served; its class and what serve reads come
// later.
func newRequest(pr *provv1.ProvisioningRequest) *request { return &request{pr: pr} }

// requestedPods is how many pods the request asks for, over all its pod
// sets, counted without overflow (each count is an int32).
func (rq *request) requestedPods() int64 {
	var n int64
	for _, ps := range rq.pr.Spec.PodSets {
		n += int64(ps.Count)
	}
	return n
}

// Conditions.

// setCondition sets a condition of the request's status and reports
// whether it changed.
func (rq *request) setCondition(typ string, status metav1.ConditionStatus, reason, msg string) bool {
	return meta.SetStatusCondition(&rq.pr.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: rq.pr.Generation})
}

// condition is the request's condition typ, or nil.
func (rq *request) condition(typ string) *metav1.Condition {
	return meta.FindStatusCondition(rq.pr.Status.Conditions, typ)
}

// is reports whether the request's condition typ is True.
func (rq *request) is(typ string) bool {
	return meta.IsStatusConditionTrue(rq.pr.Status.Conditions, typ)
}

// terminalConditions end a request: once one is True, nothing but its
// release and deletion happens to it.
var terminalConditions = []string{provv1.ConditionFailed, provv1.ConditionBookingExpired, provv1.ConditionCapacityRevoked}

// isTerminal reports whether the request has ended.
func (rq *request) isTerminal() bool {
	for _, typ := range terminalConditions {
		if rq.is(typ) {
			return true
		}
	}
	return false
}

// endedAt is when the request ended: the earliest transition to True of
// its terminal conditions.
func (rq *request) endedAt() time.Time {
	var t time.Time
	for _, typ := range terminalConditions {
		c := rq.condition(typ)
		if c != nil && c.Status == metav1.ConditionTrue && (t.IsZero() || c.LastTransitionTime.Time.Before(t)) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}

// Details (status.provisioningClassDetails).

// detail is one of the provisioner's details of the request ("": none).
func (rq *request) detail(key string) string {
	return string(rq.pr.Status.ProvisioningClassDetails[key])
}

// setDetails sets details of the request's status; an empty value removes
// the detail.
func (rq *request) setDetails(kv map[string]string) {
	pr := rq.pr
	if pr.Status.ProvisioningClassDetails == nil {
		pr.Status.ProvisioningClassDetails = map[string]provv1.Detail{}
	}
	for k, v := range kv {
		if v == "" {
			delete(pr.Status.ProvisioningClassDetails, k)
		} else {
			pr.Status.ProvisioningClassDetails[k] = provv1.Detail(v)
		}
	}
}

// count is the non-negative number detail key holds (0: none).
func (rq *request) count(key string) int {
	n, err := strconv.Atoi(rq.detail(key))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Attempts.

// attempts is how many attempts of the request have failed.
func (rq *request) attempts() int { return rq.count(DetailAttempts) }

// nextAttempt is when the request's next attempt is due (zero: now).
func (rq *request) nextAttempt() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, rq.detail(DetailNextAttempt))
	return t
}

// recordFailedAttempt counts a failed attempt at now and returns the wait
// before the next: the class's backoff, or until just past the deadline
// (then the request Fails) if that is sooner. The count is mirrored in
// AnnotationAttempts for people to read; the provisioner never reads it
// back.
func (rq *request) recordFailedAttempt(now time.Time) time.Duration {
	n := rq.attempts() + 1
	backoff := min(rq.class.backoff(n), rq.deadline.Sub(now)+time.Second)
	rq.setDetails(map[string]string{
		DetailAttempts:    strconv.Itoa(n),
		DetailNextAttempt: now.Add(backoff).UTC().Format(time.RFC3339Nano),
	})
	rq.setAnnotations(map[string]string{AnnotationAttempts: strconv.Itoa(n)})
	return backoff
}

// The scale-up attempt in flight.

// attemptID is the ID of the request's attempt number n.
func (rq *request) attemptID(n int) string {
	return fmt.Sprintf("%s-%d", rq.pr.UID, n)
}

// ownAttempt is the request's recorded scale-up attempt ("": none). A
// recorded value that is not one of the request's own attempt IDs,
// "<request UID>-<n>", is ignored (ok false): nothing is ever done to the
// nodes of another request's attempt on this request's behalf.
func (rq *request) ownAttempt() (attempt string, ok bool) {
	uid := rq.pr.UID
	a := rq.detail(DetailScaleUpAttempt)
	if a == "" {
		return "", true
	}
	rest, found := strings.CutPrefix(a, string(uid)+"-")
	if n, err := strconv.Atoi(rest); uid == "" || !found || err != nil || n < 1 || a != rq.attemptID(n) {
		return "", false
	}
	return a, true
}

// checkedAttempt is ownAttempt, logging a recorded value it ignores.
func (rq *request) checkedAttempt(ctx context.Context) string {
	a, ok := rq.ownAttempt()
	if !ok {
		klog.FromContext(ctx).Info("Ignoring a recorded scale-up attempt that is not the request's own",
			"provisioningRequest", klog.KObj(rq.pr), "uid", rq.pr.UID, "attempt", rq.detail(DetailScaleUpAttempt))
	}
	return a
}

// scaleUpInFlight reports whether the request has an attempt of its own
// whose nodes are not booked yet.
func (rq *request) scaleUpInFlight() bool {
	a, _ := rq.ownAttempt()
	return a != "" && !rq.is(provv1.ConditionProvisioned) && !rq.isTerminal()
}

// recordScaleUp records the scale-up attempt that starts at started and
// adds the nodes of plan ("group=n,...").
func (rq *request) recordScaleUp(attempt, plan string, started time.Time) {
	rq.setDetails(map[string]string{
		DetailScaleUpAttempt: attempt,
		DetailScaleUpPlan:    plan,
		DetailScaleUpStarted: started.UTC().Format(time.RFC3339Nano),
	})
}

// scaleUpRecord is the recorded plan of the request's scale-up attempt and when
// it started, as recorded (recordScaleUp).
func (rq *request) scaleUpRecord() (plan, started string) {
	return rq.detail(DetailScaleUpPlan), rq.detail(DetailScaleUpStarted)
}

// forgetAttempt forgets the request's scale-up attempt, whatever was
// recorded.
func (rq *request) forgetAttempt() {
	rq.setDetails(map[string]string{DetailScaleUpAttempt: "", DetailScaleUpPlan: "", DetailScaleUpStarted: ""})
}

// Bookings booked again (rebook.go).

// rebooks is how many rounds of the request's booking were booked again.
func (rq *request) rebooks() int { return rq.count(DetailRebooks) }

// recordRebooks records that round rounds were booked again.
func (rq *request) recordRebooks(round int) {
	rq.setDetails(map[string]string{DetailRebooks: strconv.Itoa(round)})
}

// Annotations.

// setAnnotations sets annotations of the request.
func (rq *request) setAnnotations(set map[string]string) {
	if rq.pr.Annotations == nil {
		rq.pr.Annotations = map[string]string{}
	}
	maps.Copy(rq.pr.Annotations, set)
}
