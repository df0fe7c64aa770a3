package simulator

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// DefaultEvaluations is the work budget of one provisioning attempt that
// Gantry's provisioner uses by default: about 2 s of one CPU at the ~1 µs an
// evaluation costs on 500 to 5000 nodes (docs/design/provisioning.md).
const DefaultEvaluations = 2_000_000

// Budget bounds the work of the simulations of one attempt: every Place
// call given the same Budget spends from it.
//
// An evaluation is one run of the Filter plugins for one pod on one node,
// and one per node for the PreFilter of a pod whose PreFilter reads every
// node (CrossNode). A pod with resource claims costs more per Filter run:
// its DynamicResources Filter walks the ResourceSlices of the simulation,
// so each run counts 1 plus one per slicesPerEvaluation slices.
type Budget struct {
	// Evaluations is the most the simulations may do; 0 is no bound.
	Evaluations int64
	// Deadline, when set, bounds what is not counted (the cost of a
	// filter run varies with the objects it reads).
	Deadline time.Time

	used int64
	// nextClock is the count at which the deadline is read again.
	nextClock int64
}

// slicesPerEvaluation is how many ResourceSlices a pod with claims walks
// for the cost of one evaluation (measured: a DynamicResources Filter run
// over 1000 slices costs about 250 evaluations of a pod without).
const slicesPerEvaluation = 4

// clockEvery is how many evaluations pass between two readings of the
// clock.
const clockEvery = 256

// Used is how many evaluations the simulations have done.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used
}

// spend counts n evaluations; it returns false when the budget is gone
// (late: the deadline has passed).
func (b *Budget) spend(n int64) (ok, late bool) {
	if b == nil {
		return true, false
	}
	b.used += n
	if b.Evaluations > 0 && b.used > b.Evaluations {
		return false, false
	}
	if !b.Deadline.IsZero() && b.used >= b.nextClock {
		b.nextClock = b.used + clockEvery
		if time.Now().After(b.Deadline) {
			return false, true
		}
	}
	return true, false
}

// BudgetExceeded is the simulation's answer when an attempt's budget is
// spent before it knows whether the pods fit.
type BudgetExceeded struct {
	PodSet string
	// Placed of Count pods of the set were placed when it ran out.
	Placed, Count int
	// Used and Limit are in evaluations.
	Used, Limit int64
	// Late is set when the deadline passed, not the count.
	Late bool
}

func (e *BudgetExceeded) Error() string {
	if e.Late {
		return fmt.Sprintf("pod set %s: the simulation ran out of time after placing %d of %d pods (%d filter evaluations)",
			e.PodSet, e.Placed, e.Count, e.Used)
	}
	return fmt.Sprintf("pod set %s: the simulation needed more than its budget of %d filter evaluations; %d of %d pods were placed",
		e.PodSet, e.Limit, e.Placed, e.Count)
}

// CrossNode says whether where pod may go depends on pods of other nodes:
// required inter-pod (anti-)affinity terms, or topology spread constraints
// that do not schedule when unsatisfied. Their PreFilters read every node,
// and placing such a pod can change which nodes fit pods of any shape.
func CrossNode(pod *v1.Pod) bool {
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == v1.DoNotSchedule {
			return true
		}
	}
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	return (a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0) ||
		(a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0)
}

// requiredAffinity says whether pod needs other pods near it: placing one
// such pod can make a node fit that did not fit the one before.
func requiredAffinity(pod *v1.Pod) bool {
	a := pod.Spec.Affinity
	return a != nil && a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0
}
