// Package narrowing decides whether an update of a gated pod narrows where
// the pod may run, for Gantry's kube-apiserver.
//
// Upstream (KEP-3838) lets a pod with scheduling gates gain node-selector
// entries and gain requirements appended to existing required node-affinity
// terms: syntactic additions only. This package accepts every update of the
// required node affinity that provably cannot widen placement: each new
// nodeSelectorTerm must be contained in at least one old term, i.e. every node
// the new term matches, that old term matches too. Containment is decided
// exactly, key by key, for In, NotIn, Exists, DoesNotExist, Gt and Lt on
// labels and In/NotIn on the metadata.name field, with the scheduler's own
// semantics (Gt/Lt compare labels parsed as base-10 int64, so "07" and "+7"
// are the integer 7). Where a requirement's meaning is uncertain the check
// errs towards rejecting: an old requirement it cannot interpret makes that
// old term admit nothing, a new one is ignored (so the new term is taken to
// admit more). The check is sound for affinities that pass Kubernetes
// validation, as every stored pod's does: it never accepts a widening. An
// old requirement holding a value that is not a valid label value (which
// stored pods may keep from older releases) is uninterpretable too: the
// scheduler makes such a term match no node.
//
// The check's cost is bounded for hostile input: its work is charged to a
// budget linear in the size of both affinities, and an update that would
// need more is rejected as too large to prove (sound, and clear about what
// to do). A new term kept at the index of the old term it narrows costs one
// comparison; a term moved unchanged is found by its canonical form. At most
// eight rejected terms are explained, each explanation is clipped, and the
// search for a witness node is capped, so the error text stays a few KiB.
//
// Every rejection names the new term and a concrete reason, with a node the
// new term admits and no old term does when one can be found.
package narrowing
