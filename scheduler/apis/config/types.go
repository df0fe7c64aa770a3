package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservationArgs configure the Reservation plugin.
type ReservationArgs struct {
	metav1.TypeMeta

	// TerminalReservationTTL is how long a Succeeded or Failed reservation
	// is kept before it is deleted; 0 deletes it at once.
	TerminalReservationTTL metav1.Duration
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AsyncPreemptionArgs configure the AsyncPreemption plugin.
type AsyncPreemptionArgs struct {
	metav1.TypeMeta

	// MaxConcurrentDeletes bounds the victim API calls in flight across
	// all preemptions.
	MaxConcurrentDeletes int32
	// PreemptionTimeout bounds one preemption's API work.
	PreemptionTimeout metav1.Duration
	// MinCandidateNodesPercentage and MinCandidateNodesAbsolute are
	// upstream's DefaultPreemptionArgs.
	MinCandidateNodesPercentage int32
	MinCandidateNodesAbsolute   int32
}
