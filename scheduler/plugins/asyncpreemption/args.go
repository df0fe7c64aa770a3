package asyncpreemption

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// Args configure AsyncPreemption (pluginConfig name: AsyncPreemption).
type Args struct {
	metav1.TypeMeta `json:",inline"`
	// MaxConcurrentDeletes bounds the victim API calls in flight across all
	// preemptions (default 8). They share the scheduler's client and its
	// rate limits with binding.
	MaxConcurrentDeletes *int32 `json:"maxConcurrentDeletes,omitempty"`
	// PreemptionTimeout bounds one preemption's API work (default 30s); a
	// preemption that runs out of time counts as failed.
	PreemptionTimeout *metav1.Duration `json:"preemptionTimeout,omitempty"`
	// MinCandidateNodesPercentage and MinCandidateNodesAbsolute are
	// upstream's DefaultPreemptionArgs (defaults 10 and 100).
	MinCandidateNodesPercentage *int32 `json:"minCandidateNodesPercentage,omitempty"`
	MinCandidateNodesAbsolute   *int32 `json:"minCandidateNodesAbsolute,omitempty"`
}

// Defaults of Args.
const (
	DefaultMaxConcurrentDeletes        = 8
	DefaultPreemptionTimeout           = 30 * time.Second
	DefaultMinCandidateNodesPercentage = 10
	DefaultMinCandidateNodesAbsolute   = 100
)

// DecodeArgs decodes, defaults and validates the plugin's args.
func DecodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	if err := frameworkext.DecodeArgs(obj, args); err != nil {
		return nil, fmt.Errorf("decoding %s args: %w", Name, err)
	}
	SetDefaults(args)
	if err := Validate(args); err != nil {
		return nil, err
	}
	return args, nil
}

// SetDefaults fills unset fields.
func SetDefaults(a *Args) {
	if a.MaxConcurrentDeletes == nil {
		v := int32(DefaultMaxConcurrentDeletes)
		a.MaxConcurrentDeletes = &v
	}
	if a.PreemptionTimeout == nil {
		a.PreemptionTimeout = &metav1.Duration{Duration: DefaultPreemptionTimeout}
	}
	if a.MinCandidateNodesPercentage == nil {
		v := int32(DefaultMinCandidateNodesPercentage)
		a.MinCandidateNodesPercentage = &v
	}
	if a.MinCandidateNodesAbsolute == nil {
		v := int32(DefaultMinCandidateNodesAbsolute)
		a.MinCandidateNodesAbsolute = &v
	}
}

// Validate checks defaulted args.
func Validate(a *Args) error {
	if n := *a.MaxConcurrentDeletes; n < 1 || n > 1000 {
		return fmt.Errorf("%s args: maxConcurrentDeletes must be in [1, 1000], got %d", Name, n)
	}
	if d := a.PreemptionTimeout.Duration; d <= 0 {
		return fmt.Errorf("%s args: preemptionTimeout must be positive, got %v", Name, d)
	}
	if p := *a.MinCandidateNodesPercentage; p < 0 || p > 100 {
		return fmt.Errorf("%s args: minCandidateNodesPercentage must be in [0, 100], got %d", Name, p)
	}
	if n := *a.MinCandidateNodesAbsolute; n < 0 {
		return fmt.Errorf("%s args: minCandidateNodesAbsolute must not be negative, got %d", Name, n)
	}
	if *a.MinCandidateNodesPercentage == 0 && *a.MinCandidateNodesAbsolute == 0 {
		return fmt.Errorf("%s args: minCandidateNodesPercentage and minCandidateNodesAbsolute must not both be zero", Name)
	}
	return nil
}
