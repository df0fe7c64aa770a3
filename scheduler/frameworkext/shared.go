package frameworkext

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SharedKey names state that every instance of one plugin in a scheduler
// shares (the framework builds an instance per profile that enables the
// plugin), and that goes away with the scheduler. A key is its own
// identity: two keys never share a value, whatever their names, and T is
// the value's type, so no lookup needs a type assertion. Declare one key
// per kind of state, at package level.
type SharedKey[T any] struct{ name string }

// NewSharedKey returns a new key; name is for humans (errors, debugging).
func NewSharedKey[T any](name string) *SharedKey[T] { return &SharedKey[T]{name: name} }

// String is the key's name.
func (k *SharedKey[T]) String() string { return k.name }

// Get returns the value under k in e's scheduler, creating it with create
// the first time.
func (k *SharedKey[T]) Get(e *Extender, create func() T) T {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.shared[k]; ok {
		return v.(T)
	}
	v := create()
	e.shared[k] = v
	return v
}

// ReservationNominator is how a preemption plugin sees the pending
// Reservations that preempted. A preempting reservation is nominated to the
// node its victims leave, as a pod is; the scheduler's nominator cannot hold
// it (it looks every nominee up among the Pods), so the Reservation plugin
// keeps those nominations and provides this interface (SetReservationNominator).
type ReservationNominator interface {
	// NominatedOn returns the reserve pods of the pending reservations
	// nominated to node.
	NominatedOn(node string) []*v1.Pod
	// ClearNomination forgets the nomination of the pending reservation uid.
	ClearNomination(uid types.UID)
}

// SetReservationNominator is called by the Reservation plugin when it is
// built: from then on ReservationNominator returns n.
func (e *Extender) SetReservationNominator(n ReservationNominator) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nominator = n
}

// ReservationNominator returns the Reservation plugin's nominations, or nil
// when no profile of this scheduler runs the plugin (yet: plugins are built
// in any order, so look it up when it is needed, not when built).
func (e *Extender) ReservationNominator() ReservationNominator {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.nominator
}
