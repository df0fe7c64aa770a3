package clusterapi

import "slices"

// Names of the provider's own.
const (
	// AnnotationState on a MachineDeployment holds the group's pending
	// scale-up attempts and the machines it is removing (JSON).
	AnnotationState = "autoscaling.gantry.dev/node-group-state"
	// AnnotationDeleteRequested on a Machine, next to
	// AnnotationDeleteMachine, says the provider set that annotation (the
	// value is the group), so that it can take back a request that did not
	// go through.
	AnnotationDeleteRequested = "autoscaling.gantry.dev/delete-requested"
)

// finishedKept is how many finished attempts the state remembers, so that a
// retried IncreaseSize of one is not taken for a new attempt.
const finishedKept = 64

// state is the group's bookkeeping in AnnotationState.
type state struct {
	// Group is the node group that manages the MachineDeployment.
	Group string `json:"group"`
	// Pending are the attempts not all of whose machines are labelled,
	// oldest first.
	Pending []pendingAttempt `json:"pending,omitempty"`
	// Finished are the last attempts whose machines were all labelled or
	// that were rolled back, oldest first.
	Finished []finishedAttempt `json:"finished,omitempty"`
	// Deleting are machines marked for deletion whose replica is already
	// taken off spec.replicas.
	Deleting []string `json:"deleting,omitempty"`
}

type pendingAttempt struct {
	ID    string `json:"id"`
	Delta int    `json:"delta"`
	// Labelled counts the machines labelled with the attempt so far.
	Labelled int `json:"labelled,omitempty"`
	// Before are the machines without an attempt when this one began.
	Before []string `json:"before,omitempty"`
	// MachineSets are the MachineDeployment's MachineSets when this
	// attempt began. A machine of another MachineSet (a rollout's, made
	// since) is never the attempt's. Absent (nil) in the state of a
	// provider before issue 14: such an attempt takes a machine of any
	// MachineSet, as it did.
	MachineSets []string `json:"machineSets"`
}

// admits reports whether machine m can be one of the attempt's: created
// after it began (not in Before), by a MachineSet that existed then (or by
// none: machines made directly, as test controllers do).
func (p *pendingAttempt) admits(m *machine) bool {
	if slices.Contains(p.Before, m.name) {
		return false
	}
	return p.MachineSets == nil || m.machineSet == "" || slices.Contains(p.MachineSets, m.machineSet)
}

type finishedAttempt struct {
	ID         string `json:"id"`
	RolledBack bool   `json:"rolledBack,omitempty"`
}

func (s *state) pending(id string) *pendingAttempt {
	for i := range s.Pending {
		if s.Pending[i].ID == id {
			return &s.Pending[i]
		}
	}
	return nil
}

func (s *state) finished(id string) *finishedAttempt {
	for i := range s.Finished {
		if s.Finished[i].ID == id {
			return &s.Finished[i]
		}
	}
	return nil
}

func (s *state) isDeleting(machine string) bool { return slices.Contains(s.Deleting, machine) }

// finish moves an attempt from pending to finished.
func (s *state) finish(id string, rolledBack bool) {
	s.Pending = slices.DeleteFunc(s.Pending, func(p pendingAttempt) bool { return p.ID == id })
	if f := s.finished(id); f != nil {
		f.RolledBack = f.RolledBack || rolledBack
		return
	}
	s.Finished = append(s.Finished, finishedAttempt{ID: id, RolledBack: rolledBack})
	if len(s.Finished) > finishedKept {
		s.Finished = s.Finished[len(s.Finished)-finishedKept:]
	}
}
