//go:build soak

package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// The operations beyond requests, reservations and plain pods.
const (
	opScaleUp    = "scale-up request"
	opOverQuota  = "over-quota request"
	opPreemption = "preemption"
	opNarrowing  = "gated pod narrowed, then ungated"
	opPolicy     = "MetadataPolicy change"
	opRejected   = "pod a policy rejects"
)

// Labels and keys of the run's MetadataPolicies. Their selectors select on
// labels the tenants set (opLabel, forbiddenLabel), never on keys a policy
// writes, and no two policies write one key: the invariant checker's
// MetadataPolicy family judges pods under that assumption.
const (
	// opLabel is on every pod a tenant creates: the operation it is for.
	opLabel = "soak.gantry.dev/op"
	// forbiddenLabel selects pods the governing policy rejects.
	forbiddenLabel = "soak.gantry.dev/forbidden"
	// governedLabel is what the governing policy adds to every pod.
	governedLabel = "policy.soak.gantry.dev/governed"
	// churnAnnotation is what the churned policy adds, with a value that
	// changes with each update.
	churnAnnotation = "policy.soak.gantry.dev/churn"
	// governingPolicy and churnedPolicy name the policies of a namespace.
	governingPolicy = "soak-governing"
	churnedPolicy   = "soak-churned"
)

// Priority classes of preemption's victims and preemptors. Every other pod
// of the run has priority 0, between the two.
const (
	victimClass    = "soak-victim"
	preemptorClass = "soak-preemptor"
)

// narrowingGate holds a pod while its affinity is narrowed.
const narrowingGate = "soak.gantry.dev/narrowing"

// generalInstanceType is the instance type of the cluster's general node
// group (kind/pkg/cluster NodeGroups): a pod that selects it fits no node
// the cluster started with, so its request needs a scale-up.
const generalInstanceType = "gantry.general"

// world is what every tenant shares.
type world struct {
	// client and dyn write as the tenants do: through refused, which
	// records the writes admission refused for gantry-webhook's sake.
	client  kubernetes.Interface
	dyn     dynamic.Interface
	refused *refusals
	// nodes are the cluster's own kwok nodes, which preemption pins its
	// pods to and the node fault deletes and makes again.
	nodes []v1.Node
	// additionsOnly: kube-apiserver is upstream's, which narrows a gated
	// pod's required affinity only by added requirements.
	additionsOnly bool
}

// priorityClasses makes the run's priority classes, deleted after it.
func priorityClasses(ctx context.Context) error {
	c := framework.TestContext.Client.SchedulingV1().PriorityClasses()
	for name, value := range map[string]int32{victimClass: -100, preemptorClass: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := c.Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating PriorityClass %s: %w", name, err)
		}
	}
	return nil
}

// governing is the policy every namespace of the run has from its start:
// every pod is labelled, and pods with forbiddenLabel are rejected.
func governing(ns string) *policyv1alpha1.MetadataPolicy {
	return wrappers.MakeMetadataPolicy(governingPolicy, ns).
		Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{UpdatedLabels: map[string]policyv1alpha1.LabelValue{governedLabel: "true"}}).
		Rule(policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{forbiddenLabel: "true"}}},
			policyv1alpha1.PolicyAction{Reject: true}).
		Obj()
}

// churned is the policy opPolicy creates, updates (version changes the
// annotation's value) and deletes.
func churned(ns string, version int) *policyv1alpha1.MetadataPolicy {
	return wrappers.MakeMetadataPolicy(churnedPolicy, ns).
		Rule(policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: opLabel, Operator: metav1.LabelSelectorOpExists}}}},
			policyv1alpha1.PolicyAction{UpdatedAnnotations: map[string]policyv1alpha1.AnnotationValue{churnAnnotation: policyv1alpha1.AnnotationValue(fmt.Sprintf("v%d", version))}}).
		Obj()
}

func (w *world) policies(ns string) dynamic.ResourceInterface {
	return w.dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(ns)
}

// writePolicy creates p, or updates it to p's spec when it exists.
func (w *world) writePolicy(ctx context.Context, p *policyv1alpha1.MetadataPolicy) (*policyv1alpha1.MetadataPolicy, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return nil, err
	}
	got, err := w.policies(p.Namespace).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := w.policies(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Object["spec"] = u["spec"]
			got, err = w.policies(p.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("writing MetadataPolicy %s/%s: %w", p.Namespace, p.Name, err)
	}
	out := &policyv1alpha1.MetadataPolicy{}
	return out, runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, out)
}

// waitPolicyInEffect waits until the policy's Ready condition describes
// its generation (the admission plugin writes it once it loaded it).
func (w *world) waitPolicyInEffect(ctx context.Context, p *policyv1alpha1.MetadataPolicy, timeout time.Duration) error {
	return util.PollSlowly(ctx, timeout, "MetadataPolicy "+p.Namespace+"/"+p.Name+" in effect", func(ctx context.Context) (bool, error) {
		u, err := w.policies(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var got policyv1alpha1.MetadataPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &got); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, policyv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && got.Status.ObservedGeneration >= p.Generation, nil
	})
}

// policy creates the tenant's churned policy when it has none, else
// updates it (a new annotation value) or deletes it, at even odds.
func (t *tenant) policy(ctx context.Context) (string, error) {
	pods := t.w.policies(t.pods)
	cur, err := pods.Get(ctx, churnedPolicy, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		t.churns++
		p, err := t.w.writePolicy(ctx, churned(t.pods, t.churns))
		if err != nil {
			return "", err
		}
		return resultDone, t.w.waitPolicyInEffect(ctx, p, time.Minute)
	case err != nil:
		return "", fmt.Errorf("reading MetadataPolicy %s/%s: %w", t.pods, churnedPolicy, err)
	case t.rng.IntN(2) == 0:
		t.churns++
		p, err := t.w.writePolicy(ctx, churned(t.pods, t.churns))
		if err != nil {
			return "", err
		}
		return resultDone, t.w.waitPolicyInEffect(ctx, p, time.Minute)
	default:
		if err := pods.Delete(ctx, churnedPolicy, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(cur.GetUID())}}); err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("deleting MetadataPolicy %s/%s: %w", t.pods, churnedPolicy, err)
		}
		return resultDone, nil
	}
}

// rejected creates a pod the governing policy rejects: done when the
// policy refused it; a pod created is an error (and a violation the checker
// reports too).
func (t *tenant) rejected(ctx context.Context) (string, error) {
	name := fmt.Sprintf("%s-x%d", t.name, t.n)
	p := wrappers.MakePod(name, t.pods).Requests("cpu", "100m").Label(opLabel, "rejected").Label(forbiddenLabel, "true").NoGrace().Obj()
	_, err := t.w.client.CoreV1().Pods(t.pods).Create(ctx, p, metav1.CreateOptions{})
	switch {
	case err == nil:
		t.deletePods(ctx, t.pods, name)
		return "", fmt.Errorf("pod %s/%s was created though MetadataPolicy %s rejects it", t.pods, name, governingPolicy)
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		if !strings.Contains(err.Error(), governingPolicy) {
			return "", fmt.Errorf("pod %s/%s refused, but not by MetadataPolicy %s: %w", t.pods, name, governingPolicy, err)
		}
		return resultDone, nil
	default:
		return "", fmt.Errorf("creating pod %s/%s: %w", t.pods, name, err)
	}
}

// preemption pins a victim of the lowest priority that takes 40% of a node
// to it, then a preemptor that needs 70% of the node: it can only be placed
// once the victim is preempted.
func (t *tenant) preemption(ctx context.Context) (string, error) {
	node := t.w.nodes[t.rng.IntN(len(t.w.nodes))]
	milli := node.Status.Allocatable.Cpu().MilliValue()
	name := fmt.Sprintf("%s-e%d", t.name, t.n)
	victim := wrappers.MakePod(name+"-victim", t.pods).Requests("cpu", fmt.Sprintf("%dm", milli*4/10)).
		NodeSelector(v1.LabelHostname, node.Name).PriorityClass(victimClass).Label(opLabel, "victim").NoGrace().Obj()
	c := t.w.client.CoreV1().Pods(t.pods)
	if _, err := c.Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating victim %s/%s: %w", t.pods, victim.Name, err)
	}
	defer t.deletePods(ctx, t.pods, victim.Name)
	if !t.bound(ctx, t.pods, victim.Name) {
		return resultUnplaced, nil // the node had no room for it
	}
	preemptor := wrappers.MakePod(name, t.pods).Requests("cpu", fmt.Sprintf("%dm", milli*7/10)).
		NodeSelector(v1.LabelHostname, node.Name).PriorityClass(preemptorClass).Label(opLabel, "preemptor").NoGrace().Obj()
	if _, err := c.Create(ctx, preemptor, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating preemptor %s/%s: %w", t.pods, name, err)
	}
	defer t.deletePods(ctx, t.pods, name)
	return t.waitBound(ctx, t.pods, name)
}

// narrowing creates a gated pod that may run on any of the cluster's own
// nodes, narrows its required affinity to two of them while it is gated,
// removes the gate, and checks that it was bound within the two. Gantry's
// kube-apiserver takes the narrowed term in place of the old one; on the
// stock control plane (world.additionsOnly) the narrowing is an added
// requirement, as upstream's KEP-3838 allows.
func (t *tenant) narrowing(ctx context.Context) (string, error) {
	name := fmt.Sprintf("%s-g%d", t.name, t.n)
	all := make([]string, 0, len(t.w.nodes))
	for _, n := range t.w.nodes {
		all = append(all, n.Name)
	}
	p := wrappers.MakePod(name, t.pods).Requests("cpu", "100m").Gated(narrowingGate).Label(opLabel, "narrowing").NoGrace().
		RequiredTerms(wrappers.Term(wrappers.In(v1.LabelHostname, all...))).Obj()
	c := t.w.client.CoreV1().Pods(t.pods)
	if _, err := c.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating gated pod %s/%s: %w", t.pods, name, err)
	}
	defer t.deletePods(ctx, t.pods, name)
	narrowed := slices.Clone(all)
	t.rng.Shuffle(len(narrowed), func(i, j int) { narrowed[i], narrowed[j] = narrowed[j], narrowed[i] })
	narrowed = narrowed[:2]
	update := func(what string, change func(*v1.Pod)) error {
		err := retry.OnError(retry.DefaultBackoff, func(err error) bool { return apierrors.IsConflict(err) || isUnavailable(err) }, func() error {
			cur, err := c.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(cur)
			_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("%s of pod %s/%s: %w", what, t.pods, name, err)
		}
		return nil
	}
	if err := update("narrowing the affinity", func(p *v1.Pod) {
		if t.w.additionsOnly {
			terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			terms[0].MatchExpressions = append(terms[0].MatchExpressions, wrappers.In(v1.LabelHostname, narrowed...))
			return
		}
		wrappers.SetRequiredTerms(p, wrappers.Term(wrappers.In(v1.LabelHostname, narrowed...)))
	}); err != nil {
		return "", err
	}
	if err := update("removing the gate", func(p *v1.Pod) { p.Spec.SchedulingGates = nil }); err != nil {
		return "", err
	}
	result, err := t.waitBound(ctx, t.pods, name)
	if err != nil || result != resultDone {
		return result, err
	}
	got, err := c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading pod %s/%s: %w", t.pods, name, err)
	}
	if !slices.Contains(narrowed, got.Spec.NodeName) {
		return "", fmt.Errorf("pod %s/%s was bound to %s, outside its narrowed affinity %v", t.pods, name, got.Spec.NodeName, narrowed)
	}
	return resultDone, nil
}

// isUnavailable is an error of an API server that is down or restarting:
// refused or cut connections, and the answers of one not ready yet.
func isUnavailable(err error) bool {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
	}
	for _, s := range []string{"connection refused", "connection reset by peer", "client connection lost", "EOF", "i/o timeout"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}
