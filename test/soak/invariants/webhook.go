package invariants

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// InvariantRefusedWhileWebhookReady (MetadataPolicy family): a write was
// refused because the admission webhook could not be called, or answered
// that it was not ready, while one of its replicas had been Ready for
// WebhookFailover and none had ended in the WebhookFailover before.
const InvariantRefusedWhileWebhookReady = "RefusedWhileWebhookReady"

// Refusal is a write that admission refused because of the webhook
// itself, not a policy: kube-apiserver failed to call it (a replica gone,
// a timeout) or the webhook answered that its policies were not loaded
// yet. The soak run's client records each one it meets.
type Refusal struct {
	// At is when the client got the answer.
	At time.Time
	// Verb is the request's (create, update), Object what it wrote (Name
	// is empty for a create by generateName).
	Verb   string
	Object ObjectRef
	// Message is kube-apiserver's.
	Message string
}

// webhookMemory is what the checker keeps of the webhook's replicas: when
// each replica's containers ended, and the refusals not judged yet.
type webhookMemory struct {
	ended   map[types.UID][]time.Time
	pending []Refusal
}

// replicaEnded records when each of p's containers last ended, as the
// kubelet reports it (a container's last termination, or its current one).
func (m *webhookMemory) replicaEnded(p *v1.Pod) {
	for _, cs := range p.Status.ContainerStatuses {
		for _, t := range []*v1.ContainerStateTerminated{cs.LastTerminationState.Terminated, cs.State.Terminated} {
			if t == nil || t.FinishedAt.IsZero() {
				continue
			}
			if at := t.FinishedAt.Time; !slices.ContainsFunc(m.ended[p.UID], at.Equal) {
				m.ended[p.UID] = append(m.ended[p.UID], at)
			}
		}
	}
}

// webhookReplicas are the pods of the webhook among the snapshot's pods.
func (c *Checker) webhookReplicas(ix *index) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range ix.s.Pods {
		if p.Namespace == c.cfg.WebhookNamespace && c.cfg.WebhookSelector.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

// readySince is when p's Ready condition last became True; zero when it
// is not Ready or is being deleted (then it leaves the Service's
// endpoints).
func readySince(p *v1.Pod) time.Time {
	if p.DeletionTimestamp != nil {
		return time.Time{}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// checkWebhook judges the refusals of the snapshot and of earlier ones. A
// refusal at t is judged by the first snapshot at t+Skew or later (its
// lists then show the replicas as they were after t). It broke the
// invariant if a replica was Ready then and had been since
// t-WebhookFailover or before (a replica's readiness reaches the
// Service's endpoints, and kube-apiserver's calls, that much later), and
// no replica's container had ended in [t-WebhookFailover, t] (kube-apiserver
// may still call a replica that just ended until its endpoint goes).
// Kinds of refusal the webhook is not to blame for (no replica Ready, one
// just ended) are judged and pass.
func (c *Checker) checkWebhook(ix *index) []Violation {
	if c.cfg.WebhookSelector == nil {
		return nil
	}
	replicas := c.webhookReplicas(ix)
	for _, p := range replicas {
		c.webhook.replicaEnded(p)
	}
	c.webhook.pending = append(c.webhook.pending, ix.s.Refusals...)
	var out []Violation
	var keep []Refusal
	for i, r := range c.webhook.pending {
		if ix.now.Before(r.At.Add(c.cfg.Skew)) {
			keep = append(keep, r)
			continue
		}
		c.checks[FamilyMetadataPolicy]++ // RefusedWhileWebhookReady
		if c.replicaEndedNear(r.At) {
			continue
		}
		var serving []string
		var objs []ObjectRef
		for _, p := range replicas {
			if since := readySince(p); !since.IsZero() && !since.After(r.At.Add(-c.cfg.WebhookFailover)) {
				serving = append(serving, fmt.Sprintf("%s (Ready since %s)", podRef(p), stamp(since)))
				objs = append(objs, podRef(p))
			}
		}
		if len(serving) == 0 {
			continue
		}
		object := r.Object.String()
		if r.Object.Name == "" {
			object = "a " + r.Object.Kind + " of " + r.Object.Namespace
		}
		out = append(out, c.report(fmt.Sprintf("%s/%d", stamp(r.At), i), Violation{
			Family: FamilyMetadataPolicy, Invariant: InvariantRefusedWhileWebhookReady,
			Objects: append([]ObjectRef{r.Object}, objs...), Since: r.At, Seen: ix.now,
			Message: fmt.Sprintf("the %s of %s was refused at %s (%s) while %s served, and no replica had ended in the %s before",
				r.Verb, object, stamp(r.At), strings.TrimSpace(r.Message), strings.Join(serving, ", "), c.cfg.WebhookFailover),
		})...)
	}
	c.webhook.pending = keep
	return out
}

// replicaEndedNear reports whether a replica's container ended in
// [t-WebhookFailover, t+1s]: the kubelet's time of the end is whole
// seconds.
func (c *Checker) replicaEndedNear(t time.Time) bool {
	for _, ends := range c.webhook.ended {
		for _, e := range ends {
			if !e.Before(t.Add(-c.cfg.WebhookFailover)) && !e.After(t.Add(time.Second)) {
				return true
			}
		}
	}
	return false
}
