// Package validation validates the defaulted, internal args of Gantry's
// kube-scheduler plugins; each plugin calls its validator in New.
package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gantry-dev/gantry/scheduler/apis/config"
)

// MaxConcurrentDeletesLimit bounds AsyncPreemptionArgs.MaxConcurrentDeletes.
const MaxConcurrentDeletesLimit = 1000

// ValidateReservationArgs validates the Reservation plugin's args.
func ValidateReservationArgs(path *field.Path, a *config.ReservationArgs) error {
	var errs field.ErrorList
	if d := a.TerminalReservationTTL.Duration; d < 0 {
		errs = append(errs, field.Invalid(path.Child("terminalReservationTTL"), d.String(), "must not be negative"))
	}
	return errs.ToAggregate()
}

// ValidateAsyncPreemptionArgs validates the AsyncPreemption plugin's args.
func ValidateAsyncPreemptionArgs(path *field.Path, a *config.AsyncPreemptionArgs) error {
	var errs field.ErrorList
	if n := a.MaxConcurrentDeletes; n < 1 || n > MaxConcurrentDeletesLimit {
		errs = append(errs, field.Invalid(path.Child("maxConcurrentDeletes"), n, "must be in [1, 1000]"))
	}
	if d := a.PreemptionTimeout.Duration; d <= 0 {
		errs = append(errs, field.Invalid(path.Child("preemptionTimeout"), d.String(), "must be positive"))
	}
	if p := a.MinCandidateNodesPercentage; p < 0 || p > 100 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesPercentage"), p, "must be in [0, 100]"))
	}
	if n := a.MinCandidateNodesAbsolute; n < 0 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesAbsolute"), n, "must not be negative"))
	}
	if a.MinCandidateNodesPercentage == 0 && a.MinCandidateNodesAbsolute == 0 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesAbsolute"), 0,
			"must not be zero when minCandidateNodesPercentage is zero"))
	}
	return errs.ToAggregate()
}
