package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Defaults of the args.
const (
	DefaultTerminalReservationTTL      = 10 * time.Minute
	DefaultMaxConcurrentDeletes        = 8
	DefaultPreemptionTimeout           = 30 * time.Second
	DefaultMinCandidateNodesPercentage = 10
	DefaultMinCandidateNodesAbsolute   = 100
)

// SetDefaults_ReservationArgs fills unset fields.
func SetDefaults_ReservationArgs(a *ReservationArgs) {
	if a.TerminalReservationTTL == nil {
		a.TerminalReservationTTL = &metav1.Duration{Duration: DefaultTerminalReservationTTL}
	}
}

// SetDefaults_AsyncPreemptionArgs fills unset fields.
func SetDefaults_AsyncPreemptionArgs(a *AsyncPreemptionArgs) {
	if a.MaxConcurrentDeletes == nil {
		a.MaxConcurrentDeletes = ptr.To[int32](DefaultMaxConcurrentDeletes)
	}
	if a.PreemptionTimeout == nil {
		a.PreemptionTimeout = &metav1.Duration{Duration: DefaultPreemptionTimeout}
	}
	if a.MinCandidateNodesPercentage == nil {
		a.MinCandidateNodesPercentage = ptr.To[int32](DefaultMinCandidateNodesPercentage)
	}
	if a.MinCandidateNodesAbsolute == nil {
		a.MinCandidateNodesAbsolute = ptr.To[int32](DefaultMinCandidateNodesAbsolute)
	}
}
