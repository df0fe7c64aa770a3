package metadatapolicy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// StatusFieldManager owns the status the policy plugins write.
const StatusFieldManager = "gantry-metadatapolicy"

// maxConditionMessage keeps conditions readable (and within API limits).
const maxConditionMessage = 2048

// desiredStatus computes a policy's status: Ready (in effect, audit only,
// or invalid) and Conflict (other policies that may write one of its keys
// with a different value).
func desiredStatus(e *entry, conflicts map[*engine.Policy][]string, now metav1.Time) policyv1alpha1.MetadataPolicyStatus {
	st := policyv1alpha1.MetadataPolicyStatus{ObservedGeneration: e.generation}
	set := func(c metav1.Condition) {
		c.ObservedGeneration = e.generation
		c.LastTransitionTime = now
		// Keep the transition time of a condition whose status did not change.
		if old := apimeta.FindStatusCondition(e.status.Conditions, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		if len(c.Message) > maxConditionMessage {
			c.Message = c.Message[:maxConditionMessage-3] + "..."
		}
		st.Conditions = append(st.Conditions, c)
	}
	switch {
	case e.policy == nil && e.fallback != nil:
		set(metav1.Condition{Type: policyv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Invalid",
			Message: "the policy does not compile, and it has reject rules: every request it targets is rejected until it is fixed or deleted: " + e.invalid})
	case e.policy == nil:
		set(metav1.Condition{Type: policyv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Invalid",
			Message: "the policy does not compile and is not applied (it has no reject rule): " + e.invalid})
	case e.policy.Enforcement == policyv1alpha1.Audit:
		set(metav1.Condition{Type: policyv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: policyv1alpha1.ReasonAuditOnly,
			Message: "the policy is evaluated and reported (audit annotations and events), never enforced"})
	default:
		set(metav1.Condition{Type: policyv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: policyv1alpha1.ReasonInEffect,
			Message: "the policy is enforced; schedulerName applies to pods at CREATE only"})
	}
	if msgs := conflicts[e.policy]; e.policy != nil && len(msgs) > 0 {
		set(metav1.Condition{Type: policyv1alpha1.ConditionConflict, Status: metav1.ConditionTrue, Reason: policyv1alpha1.ReasonConflictingWrite,
			Message: "other policies may write the same keys with different values (ClusterMetadataPolicies win over MetadataPolicies, then names in order, then rule order): " + strings.Join(msgs, "; ")})
	} else {
		set(metav1.Condition{Type: policyv1alpha1.ConditionConflict, Status: metav1.ConditionFalse, Reason: policyv1alpha1.ReasonNoConflict,
			Message: "no other policy writes this policy's keys with different values"})
	}
	return st
}

// sameStatus compares statuses ignoring transition times.
func sameStatus(a, b policyv1alpha1.MetadataPolicyStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for _, c := range a.Conditions {
		o := apimeta.FindStatusCondition(b.Conditions, c.Type)
		if o == nil {
			return false
		}
		c.LastTransitionTime = o.LastTransitionTime
		if !equality.Semantic.DeepEqual(c, *o) {
			return false
		}
	}
	return true
}

// RunStatus keeps every policy's status true to the source, writing it with
// server-side apply whenever it differs. Several writers (one per API server)
// compute the same status, so they converge. nsLabels returns a namespace's
// labels for conflict detection.
func (s *Source) RunStatus(ctx context.Context, nsLabels func(string) (map[string]string, bool)) {
	logger := klog.FromContext(ctx).WithName("metadatapolicy-status")
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		case <-retry.C:
		}
		// Let a burst of changes settle.
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		if failed := s.writeStatuses(ctx, logger, nsLabels); failed > 0 {
			retry.Reset(5 * time.Second)
		}
	}
}

func (s *Source) writeStatuses(ctx context.Context, logger klog.Logger, nsLabels func(string) (map[string]string, bool)) (failed int) {
	entries := s.entries()
	var compiled []*engine.Policy
	for i := range entries {
		if entries[i].policy != nil {
			compiled = append(compiled, entries[i].policy)
		}
	}
	conflicts := engine.Conflicts(compiled, nsLabels)
	now := metav1.Now()
	for i := range entries {
		e := &entries[i]
		want := desiredStatus(e, conflicts, now)
		if sameStatus(want, e.status) {
			continue
		}
		if err := s.applyStatus(ctx, e, want); err != nil {
			failed++
			logger.Error(err, "Writing policy status", "kind", e.kind, "namespace", e.namespace, "name", e.name)
		}
	}
	return failed
}

func (s *Source) applyStatus(ctx context.Context, e *entry, st policyv1alpha1.MetadataPolicyStatus) error {
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetAPIVersion(policyv1alpha1.SchemeGroupVersion.String())
	u.SetKind(e.kind)
	u.SetName(e.name)
	gvr := MetadataPoliciesResource
	if e.namespace == "" {
		gvr = ClusterMetadataPoliciesResource
	} else {
		u.SetNamespace(e.namespace)
	}
	_, err = s.dynamic.Resource(gvr).Namespace(e.namespace).ApplyStatus(ctx, e.name, u,
		metav1.ApplyOptions{FieldManager: StatusFieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying status of %s %s/%s: %w", e.kind, e.namespace, e.name, err)
	}
	return nil
}
