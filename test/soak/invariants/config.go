package invariants

import (
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/scaledown"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	configv1 "github.com/gantry-dev/gantry/scheduler/apis/config/v1"
)

// Config holds the checker's limits. DefaultConfig ties each to the value
// in Gantry's code that it stands for; a soak run that sets a flag or a
// class away from its default sets the field to match.
type Config struct {
	// StatusResync is the Reservation status controller's resync period. It
	// has none (0): it acts when the scheduler's store notifies it of a
	// change and at each reservation's expiry (queue.AddAfter), see
	// scheduler/plugins/reservation/statuscontroller.go (Run, reconcile).
	StatusResync time.Duration
	// Grace is issue 40's allowance beyond StatusResync: a Reservation may
	// outlive its TTL, its node, its consumption or its request by
	// StatusResync+Grace.
	Grace time.Duration
	// TerminalReservationTTL is how long a Succeeded or Failed Reservation
	// is kept (the Reservation plugin's terminalReservationTTL, default
	// 10m, scheduler/apis/config/v1 DefaultTerminalReservationTTL; the local
	// cluster's profile sets 2m, scheduler/profiles
	// LocalTerminalReservationTTL). Negative: not checked.
	TerminalReservationTTL time.Duration
	// Skew is how long a state that must never hold (double booking, quota
	// exceeded, a booking larger than its request) must persist before it
	// is reported: the snapshot's lists come from separate informers, which
	// may be that far apart. It is no value of Gantry's code.
	Skew time.Duration

	// Classes are the request classes the ProvisioningRequest family
	// judges (empty: every request). The provisioner leaves requests of
	// other classes to other controllers (controller.go resolveClass).
	Classes []string
	// DefaultValidUntil is a request's validity when it sets no
	// ValidUntilSeconds and its class none (provisioning.DefaultValidUntil,
	// autoscaler/provisioning/class.go, 7 days).
	DefaultValidUntil time.Duration
	// ClassValidUntil is the validity of ProvisioningClasses that set
	// their own (spec.validUntilSeconds), by class name.
	ClassValidUntil map[string]time.Duration
	// ValidityGrace is how long past its validity a request may take to be
	// Provisioned or to end: a booking made just before the deadline may
	// stay unplaced for the provisioner's --booking-placement-timeout
	// (30s, autoscaler/app/options.go) before its attempt fails, and then
	// the request Fails; plus Grace.
	ValidityGrace time.Duration
	// ClassGrace is added to ValidityGrace for a class whose attempt may
	// run past the deadline: an atomic scale-up's nodes have the class's
	// provisioningTimeout to become Ready (provisioning
	// DefaultProvisioningTimeout, 5m, for the upstream atomic class names).
	ClassGrace map[string]time.Duration

	// ScaleDownUnneededTime, ScaleDownTaintGrace and ScaleDownInterval are
	// the provisioner's --scale-down-unneeded-time (10m; 0 turns scale-down
	// and this family off), --scale-down-taint-grace (5s) and
	// --scale-down-interval (10s), autoscaler/app/options.go.
	ScaleDownUnneededTime time.Duration
	ScaleDownTaintGrace   time.Duration
	ScaleDownInterval     time.Duration
	// KeepNodeGroups are node groups whose nodes scale-down may keep for
	// the group's minimum size; their nodes are not judged.
	KeepNodeGroups []string

	// PreemptionLimit is how long a pending preemptor may keep its
	// nomination to one node before it is bound there or the nomination is
	// cleared: AsyncPreemption's preemptionTimeout (its API work; default
	// 30s, scheduler/apis/config/v1 DefaultPreemptionTimeout), plus the
	// longest backoff after a failed preemption (10s, the cap in
	// scheduler/plugins/asyncpreemption executor.go finish), plus the wait
	// for the victims to leave the scheduler's cache (5s, leaveWait there),
	// plus Grace. A victim's termination grace period counts against Grace:
	// the soak workload's pods end within it. 0 or less: PreemptorStuck is
	// not judged.
	PreemptionLimit time.Duration
	// PolicyLag is how long after a MetadataPolicy generation is written
	// the admission plugin and the webhook may still admit pods without
	// it: their policy informers have no resync and nothing bounds their
	// lag (admission/metadatapolicy source.go), so it is a choice of the
	// checker's, 5s, with no Grace added. A pod is judged against a
	// generation only if the checker saw it PolicyLag or more before the
	// pod's creation (see checkMetadataPolicies).
	PolicyLag time.Duration
	// WebhookNamespace and WebhookSelector find the admission webhook's
	// replicas among the pods (gantry-webhook's, on a cluster whose
	// kube-apiserver calls it); a nil selector judges no Refusal.
	// WebhookFailover is how long kube-apiserver may keep calling a
	// replica that ended, and not yet call one that became Ready: the
	// kubelet's notice of the container's end or of the readiness probe,
	// the EndpointSlice controller and kube-proxy's rules on the
	// control-plane node in turn. It is no value of Gantry's code: 10s, a
	// choice of the checker's.
	WebhookNamespace string
	WebhookSelector  labels.Selector
	WebhookFailover  time.Duration

	// HeapRatio and GoroutineRatio bound a component's heap after GC and
	// goroutine count at the end of a run against their level after
	// warm-up (issue 40: 1.5 and 1.10).
	HeapRatio      float64
	GoroutineRatio float64
	// LeakWarmUp is how long after a component's first sample its level is
	// taken; LeakWindow is how many samples' time the level and the end are
	// each the median of. Neither is a value of Gantry's code: the soak run
	// chooses them.
	LeakWarmUp time.Duration
	LeakWindow time.Duration
}

// Flag defaults of gantry-provisioner (autoscaler/app NewOptions) that
// DefaultConfig uses; they are no exported constants there. The other
// defaults come from the constants of Gantry's code.
const (
	// defaultPlacementTimeout: --booking-placement-timeout.
	defaultPlacementTimeout = 30 * time.Second
	// defaultScaleDownUnneededTime, defaultScaleDownInterval:
	// --scale-down-unneeded-time, --scale-down-interval.
	defaultScaleDownUnneededTime = 10 * time.Minute
	defaultScaleDownInterval     = 10 * time.Second
)

// AsyncPreemption's timings that PreemptionLimit adds up; they are no
// exported constants of scheduler/plugins/asyncpreemption (executor.go).
const (
	// preemptionBackoffCap: the longest backoff after a failed preemption
	// (finish: min(1s<<(failures-1), 10s)).
	preemptionBackoffCap = 10 * time.Second
	// victimsLeaveWait: leaveWait, how long a successful preemption keeps
	// its preemptor gated for the victims to leave the cache.
	victimsLeaveWait = 5 * time.Second
	// defaultPolicyLag: see Config.PolicyLag.
	defaultPolicyLag = 5 * time.Second
	// defaultWebhookFailover: see Config.WebhookFailover.
	defaultWebhookFailover = 10 * time.Second
)

// DefaultConfig is issue 40's limits over the defaults of Gantry's
// components.
func DefaultConfig() Config {
	grace := 30 * time.Second
	return Config{
		StatusResync:           0,
		Grace:                  grace,
		TerminalReservationTTL: configv1.DefaultTerminalReservationTTL,
		Skew:                   5 * time.Second,
		DefaultValidUntil:      provisioning.DefaultValidUntil,
		ValidityGrace:          defaultPlacementTimeout + grace,
		ClassGrace: map[string]time.Duration{
			provv1.ClassBestEffortAtomicScaleUp: provisioning.DefaultProvisioningTimeout,
			provv1.ClassAtomicScaleUpLegacy:     provisioning.DefaultProvisioningTimeout,
		},
		ScaleDownUnneededTime: defaultScaleDownUnneededTime,
		ScaleDownTaintGrace:   scaledown.DefaultTaintGrace,
		ScaleDownInterval:     defaultScaleDownInterval,
		PreemptionLimit:       configv1.DefaultPreemptionTimeout + preemptionBackoffCap + victimsLeaveWait + grace,
		PolicyLag:             defaultPolicyLag,
		WebhookFailover:       defaultWebhookFailover,
		HeapRatio:             1.5,
		GoroutineRatio:        1.10,
		LeakWarmUp:            5 * time.Minute,
		LeakWindow:            time.Minute,
	}
}

// reservationLag is how long a Reservation may outlive what ends it.
func (c Config) reservationLag() time.Duration { return c.StatusResync + c.Grace }
