package provisioning

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// Defaults of a class that a ProvisioningClass does not set, and of the
// upstream class names.
const (
	DefaultValidUntil          = 10 * time.Minute
	DefaultBookingDuration     = 10 * time.Minute
	DefaultBackoffInitial      = 10 * time.Second
	DefaultBackoffMax          = 5 * time.Minute
	DefaultProvisioningTimeout = 5 * time.Minute
	// MaxValidUntil bounds a request's ValidUntilSeconds parameter, unless
	// its class's own validity is longer: each retry until then is a
	// simulation under bookMu, and a tenant's value must not keep a
	// request retried for years. A larger value Fails the request with
	// InvalidParameter.
	MaxValidUntil = 24 * time.Hour
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
}

// parameters reads the request's parameters over the class's defaults; a
// malformed one is an error the request Fails with.
func parameters(r *provv1.ProvisioningRequest, c Class) (Parameters, error) {
	p := Parameters{ValidUntil: c.ValidUntil}
	if v, ok := r.Spec.Parameters[provv1.ParameterValidUntilSeconds]; ok {
		n, err := strconv.ParseInt(string(v), 10, 32)
		if err != nil || n < 1 {
			return p, fmt.Errorf("parameter %s must be a positive number of seconds, got %q", provv1.ParameterValidUntilSeconds, v)
		}
		if limit := max(MaxValidUntil, c.ValidUntil); time.Duration(n)*time.Second > limit {
			return p, fmt.Errorf("parameter %s must be at most %d seconds (%s), got %q", provv1.ParameterValidUntilSeconds, int64(limit/time.Second), limit, v)
		}
		p.ValidUntil = time.Duration(n) * time.Second
	}
	if v, ok := r.Spec.Parameters[provv1.ParameterNoRetry]; ok {
		b, err := strconv.ParseBool(string(v))
		if err != nil {
			return p, fmt.Errorf("parameter %s must be true or false, got %q", provv1.ParameterNoRetry, v)
		}
		p.NoRetry = b
	}
	return p, nil
}
