package provisioning

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// Defaults of a class that a ProvisioningClass does not set, and of the
// upstream class names.
const (
	// DefaultValidUntil is how long a request is retried when neither it
	// nor its class says: cluster-autoscaler fails a request that found no
	// capacity 7 days after its creation (and reads no ValidUntilSeconds),
	// and clients such as Kueue hold a workload's quota while they wait,
	// counting a Failed request as a failed attempt of the workload.
	DefaultValidUntil          = 7 * 24 * time.Hour
	DefaultBookingDuration     = 10 * time.Minute
	DefaultBackoffInitial      = 10 * time.Second
	DefaultBackoffMax          = 5 * time.Minute
	DefaultProvisioningTimeout = 5 * time.Minute
	// MaxValidUntil bounds a request's ValidUntilSeconds parameter, unless
	// its class's own validity is longer: each retry until then is a
	// simulation (at most one per DefaultBackoffMax), and a
	// tenant's value must not keep a request retried for years. A larger
	// value Fails the request with InvalidParameter.
	MaxValidUntil = DefaultValidUntil
)

// Class is how the provisioner serves a request: its handler and defaults.
type Class struct {
	// Name is the request's provisioningClassName.
	Name                string
	Handler             autoscalingv1alpha1.Handler
	ValidUntil          time.Duration
	BookingDuration     time.Duration
	BackoffInitial      time.Duration
	BackoffMax          time.Duration
	NodeGroups          []string
	ProvisioningTimeout time.Duration
}

// builtinClass is the class of the upstream class names, or false.
func builtinClass(name string) (Class, bool) {
	c := Class{Name: name, ValidUntil: DefaultValidUntil, BookingDuration: DefaultBookingDuration,
		BackoffInitial: DefaultBackoffInitial, BackoffMax: DefaultBackoffMax, ProvisioningTimeout: DefaultProvisioningTimeout}
	switch name {
	case provv1.ClassCheckCapacity, provv1.ClassCheckCapacityLegacy:
		c.Handler = autoscalingv1alpha1.HandlerCheckCapacity
	case provv1.ClassBestEffortAtomicScaleUp, provv1.ClassAtomicScaleUpLegacy:
		c.Handler = autoscalingv1alpha1.HandlerAtomicScaleUp
	default:
		return Class{}, false
	}
	return c, true
}

// classOf is the class a ProvisioningClass defines.
func classOf(pc *autoscalingv1alpha1.ProvisioningClass) Class {
	s := pc.Spec
	c := Class{Name: pc.Name, Handler: s.Handler, NodeGroups: s.NodeGroups,
		ValidUntil:          time.Duration(ptr.Deref(s.ValidUntilSeconds, int32(DefaultValidUntil/time.Second))) * time.Second,
		BookingDuration:     durationOr(s.BookingDuration, DefaultBookingDuration),
		ProvisioningTimeout: durationOr(s.ProvisioningTimeout, DefaultProvisioningTimeout),
		BackoffInitial:      DefaultBackoffInitial, BackoffMax: DefaultBackoffMax,
	}
	if s.Backoff != nil {
		c.BackoffInitial = durationOr(s.Backoff.Initial, DefaultBackoffInitial)
		c.BackoffMax = durationOr(s.Backoff.Max, DefaultBackoffMax)
	}
	return c
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// backoff is the delay before attempt n+1 after n failed attempts.
func (c Class) backoff(n int) time.Duration {
	d := c.BackoffInitial
	// d > 0: the attempt count n is bounded by nothing, and a zero initial
	// backoff would never reach the maximum.
	for i := 1; i < n && d > 0 && d < c.BackoffMax; i++ {
		d *= 2
	}
	return min(d, c.BackoffMax)
}

// Parameters are a request's parameters, read.
type Parameters struct {
	// ValidUntil is how long after its creation the request is retried.
	ValidUntil time.Duration
	NoRetry    bool
	// PodGroup is the PodGroup whose members may use the booking
	// (ParameterPodGroup), "" for none.
	PodGroup string
	// Ignored says which parameters were ignored and why (for the
	// request's Accepted condition and an event).
	Ignored []string
}

// parameters reads the request's parameters over the class's defaults; a
// malformed ValidUntilSeconds or PodGroup is an error the request Fails
// with.
//
// noRetry is read as cluster-autoscaler reads it: "true" or "false",
// exactly; any other value is ignored (the request is retried), and said
// so in Ignored.
func parameters(r *provv1.ProvisioningRequest, c Class) (Parameters, error) {
	p := Parameters{ValidUntil: c.ValidUntil}
	if v, ok := r.Spec.Parameters[provv1.ParameterValidUntilSeconds]; ok {
		n, err := strconv.ParseInt(string(v), 10, 32)
		if err != nil || n < 1 {
			return p, fmt.Errorf("parameter %s must be a positive number of seconds, got %q", provv1.ParameterValidUntilSeconds, truncate(string(v)))
		}
		if limit := max(MaxValidUntil, c.ValidUntil); time.Duration(n)*time.Second > limit {
			return p, fmt.Errorf("parameter %s must be at most %d seconds (%s), got %q", provv1.ParameterValidUntilSeconds, int64(limit/time.Second), limit, truncate(string(v)))
		}
		p.ValidUntil = time.Duration(n) * time.Second
	}
	if v, ok := r.Spec.Parameters[ParameterPodGroup]; ok {
		if errs := validation.IsDNS1123Subdomain(string(v)); len(errs) > 0 {
			return p, fmt.Errorf("parameter %s must name a PodGroup of the request's namespace (a DNS subdomain: at most 253 lowercase letters, digits, '-' and '.'), got %q",
				ParameterPodGroup, truncate(string(v)))
		}
		p.PodGroup = string(v)
	}
	if v, ok := r.Spec.Parameters[provv1.ParameterNoRetry]; ok {
		switch v {
		case "true":
			p.NoRetry = true
		case "false":
		default:
			p.Ignored = append(p.Ignored, fmt.Sprintf("parameter %s ignored: want \"true\" or \"false\", got %q", provv1.ParameterNoRetry, truncate(string(v))))
		}
	}
	return p, nil
}

// RequestPodGroup is the PodGroup the request's ParameterPodGroup names,
// "" for none or a name parameters refuses.
func RequestPodGroup(r *provv1.ProvisioningRequest) string {
	v := string(r.Spec.Parameters[ParameterPodGroup])
	if v == "" || len(validation.IsDNS1123Subdomain(v)) > 0 {
		return ""
	}
	return v
}

// maxShownParameter bounds how much of a tenant's parameter value a
// condition message or event repeats (a parameter may be as long as the
// object allows).
const maxShownParameter = 64

func truncate(s string) string {
	if len(s) <= maxShownParameter {
		return s
	}
	return s[:maxShownParameter] + "..."
}
