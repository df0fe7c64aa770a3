// Package engine evaluates MetadataPolicies against an object's metadata.
// It is shared by the in-process kube-apiserver admission plugin and by
// gantry-webhook, so both deployments decide identically.
//
// Semantics:
//   - Every policy that selects the object (by target resource and
//     operation, namespace, and each rule's label and annotation
//     predicates) is evaluated against the object as submitted.
//   - If any matching rule of an enforced policy rejects, the object is
//     rejected without mutation; the message names every rejecting policy
//     and rule.
//   - Otherwise every matching rule's mutations apply, in a documented
//     order: ClusterMetadataPolicies before MetadataPolicies, then by name,
//     then by rule index. When two rules write one key with different
//     values the earlier writer wins and the conflict is reported.
//   - schedulerName applies to pods at CREATE only (the field is immutable).
//   - Audit policies are evaluated the same way, separately: what they
//     would do is reported, nothing is changed.
//   - The admission plugins evaluate the enforced reject rules again in the
//     validating phase, on the object after all mutation: a rejection holds.
//   - A target names a resource, never a subresource (a compile error); a
//     policy on a resource applies to subresource updates that change the
//     object's labels or annotations.
//   - A policy that does not compile but has reject rules is replaced by a
//     stand-in (Invalid) that rejects every request the policy targets,
//     naming it: invalid reject rules fail closed.
//   - A MetadataPolicy (namespaced) never applies to a cluster-scoped
//     object, its own Namespace included; targeting a well-known
//     cluster-scoped resource is a compile error (ClusterScopedResources).
//
// Cost is bounded against tenants that create many policies: Conflicts
// groups writes by key and namespace and stops each policy's analysis at
// MaxConflictMessages conflicts (and a pass at MaxOverlapChecks pairs), and
// what one evaluation reports (rejections, writes, conflicts, ignored
// writes) lists at most MaxReported items of MaxReportedItemBytes, then
// "and N more".
package engine
