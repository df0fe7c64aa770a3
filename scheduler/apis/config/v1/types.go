package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservationArgs configure the Reservation plugin (pluginConfig name
// Reservation).
type ReservationArgs struct {
	metav1.TypeMeta `json:",inline"`

	// TerminalReservationTTL is how long a Succeeded or Failed reservation
	// is kept before it is deleted. Default 10m; 0 deletes it at once.
	// +optional
	TerminalReservationTTL *metav1.Duration `json:"terminalReservationTTL,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AsyncPreemptionArgs configure the AsyncPreemption plugin (pluginConfig
// name AsyncPreemption).
type AsyncPreemptionArgs struct {
	metav1.TypeMeta `json:",inline"`

	// MaxConcurrentDeletes bounds the victim API calls in flight across all
	// preemptions (default 8, at most 1000). They share the scheduler's
	// client and its rate limits with binding.
	// +optional
	MaxConcurrentDeletes *int32 `json:"maxConcurrentDeletes,omitempty"`
	// PreemptionTimeout bounds one preemption's API work (default 30s); a
	// preemption that runs out of time counts as failed.
	// +optional
	PreemptionTimeout *metav1.Duration `json:"preemptionTimeout,omitempty"`
	// MinCandidateNodesPercentage and MinCandidateNodesAbsolute are
	// upstream's DefaultPreemptionArgs (defaults 10 and 100).
	// +optional
	MinCandidateNodesPercentage *int32 `json:"minCandidateNodesPercentage,omitempty"`
	// +optional
	MinCandidateNodesAbsolute *int32 `json:"minCandidateNodesAbsolute,omitempty"`
}
