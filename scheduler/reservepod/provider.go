package reservepod

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// Preemptor is the name of the PostFilter plugin that knows reserve pods,
// Gantry's AsyncPreemption: it neither looks them up as Pods nor writes
// their status, it keeps a preempting reservation's nomination through the
// Provider, and it preempts an Available reservation by failing it. The
// Reservation plugin lets a pending reservation preempt only in profiles
// whose PostFilter runs this plugin (and nothing that would mistake a
// reserve pod for a Pod).
const Preemptor = "AsyncPreemption"

// Nominator holds the nominations of the pending reservations that
// preempted. A preempting reservation is nominated to the node its victims
// leave, as a pod is; the scheduler's nominator cannot hold it (it looks
// every nominee up among the Pods), so the Reservation plugin does.
type Nominator interface {
	// NominatedOn returns the reserve pods of the pending reservations
	// nominated to node.
	NominatedOn(node string) []*v1.Pod
	// ClearNomination forgets the nomination of the pending reservation uid.
	ClearNomination(uid types.UID)
}

// Allocations checks the reservation an owner pod is placed in. The
// allocation annotation (schedv1alpha1.AnnotationAllocated) is
// tenant-writable, so only the live reservation it names can vouch for it.
type Allocations interface {
	// AllocatedPriority returns the own priority of the live reservation p
	// is placed in, and false unless its annotation names a known
	// reservation, p is one of that reservation's owners and p is bound to
	// the reservation's node.
	AllocatedPriority(p *v1.Pod) (int32, bool)
}

// Provider is what the Reservation plugin shares with the other plugins of
// its scheduler: its store, which holds the nominations of preempting
// reservations and vouches for owner pods' allocations.
type Provider interface {
	Nominator
	Allocations
}

// providerKey holds the Provider of one scheduler.
var providerKey = frameworkext.NewSharedKey[Provider]("reservepod.Provider")

// Provide makes p the Provider of e's scheduler. The Reservation plugin
// calls it once, when its first instance is built.
func Provide(e *frameworkext.Extender, p Provider) { providerKey.Set(e, p) }

// ProviderOf returns the Provider of e's scheduler, or nil while there is
// none: no profile of the scheduler runs the Reservation plugin, or it has
// not been built yet. Plugins are built in any order, so look it up when it
// is needed, not when built. Without a Provider there are no nominations of
// reservations, and no pod is placed in a reservation, whatever its
// annotations say.
func ProviderOf(e *frameworkext.Extender) Provider {
	p, _ := providerKey.Lookup(e)
	return p
}
