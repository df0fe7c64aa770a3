package preemption

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/util"
	utilgomega "github.com/gantry-dev/gantry/test/util/gomega"
	"github.com/gantry-dev/gantry/test/wrappers"
)

const (
	// promptly bounds how long a preemptor may take to be bound once it
	// exists: the executor re-activates it as soon as its API work ends,
	// so only a missed re-activation (a wait for the scheduler's 5-minute
	// flush of unschedulable pods, or a 60s+ backoff) exceeds it.
	promptly = 20 * time.Second

	// quiet is how long a spec watches that nothing happens to a pod that
	// must not preempt.
	quiet = 10 * time.Second
)

// The preemption metrics of kube-scheduler (scheduler/plugins/asyncpreemption).
const (
	metricAttempts   = "gantry_preemption_attempts_total"
	metricVictims    = "gantry_preemption_victims_total"
	metricExecutions = "gantry_preemption_goroutine_executions_total"
)

// tester is what every spec of the suite works with: the framework's
// namespace and clients, and the cluster's kwok nodes.
type tester struct {
	*framework.Framework
	// nodes are the cluster's kwok nodes, by name.
	nodes []v1.Node
}

// newTester registers, after the framework's, the setup of every spec:
// wait for the kwok nodes to be idle, and end the spec with
// framework.EndSpec.
func newTester(f *framework.Framework) *tester {
	t := &tester{Framework: f}
	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		framework.RequireLocal("the specs read kube-scheduler's preemption metrics")
		t.nodes = framework.KwokNodes(ctx, 2)
		for i := range t.nodes[:2] {
			gomega.Expect(t.cpus(t.nodes[i].Name)).To(gomega.BeNumerically(">=", 3),
				"node %s is too small to fill with one-CPU pods and preempt two", t.nodes[i].Name)
		}
		ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) { t.EndSpec(ctx, t.nodes, nil) })
		framework.ExpectIdle(ctx, t.nodes, nil)
	})
	return t
}

// cpus is how many one-CPU pods fill the node.
func (t *tester) cpus(node string) int {
	for i := range t.nodes {
		if t.nodes[i].Name == node {
			return int(t.nodes[i].Status.Allocatable.Cpu().MilliValue() / 1000)
		}
	}
	ginkgo.Fail("no kwok node " + node)
	return 0
}

// fill creates n one-CPU pods of priority class class, named prefix-0…,
// with labels, pinned to node, and waits until all are bound there.
func (t *tester) fill(ctx context.Context, node, class, prefix string, n int, labels map[string]string) []*v1.Pod {
	ginkgo.GinkgoHelper()
	names := make([]string, 0, n)
	for i := range n {
		p := wrappers.MakePod(fmt.Sprintf("%s-%d", prefix, i), t.Namespace).PriorityClass(class).
			Requests("cpu", "1", "memory", "64Mi").OnNode(node)
		for k, v := range labels {
			p.Label(k, v)
		}
		names = append(names, t.CreatePod(ctx, p).Name)
	}
	out := make([]*v1.Pod, 0, n)
	for _, name := range names {
		out = append(out, t.waitBoundTo(ctx, name, node))
	}
	return out
}

// waitBoundTo waits until pod name is bound to node, and returns it.
func (t *tester) waitBoundTo(ctx context.Context, name, node string) *v1.Pod {
	ginkgo.GinkgoHelper()
	return t.WaitForPod(ctx, util.LongTimeout, name, "bound to "+node, func(p *v1.Pod) bool { return p.Spec.NodeName == node })
}

// createPreemptor creates pod name of priority class class that needs two
// CPUs of node, or of one of nodes.
func (t *tester) createPreemptor(ctx context.Context, name, class string, nodes ...string) *v1.Pod {
	ginkgo.GinkgoHelper()
	return t.CreatePod(ctx, wrappers.MakePod(name, t.Namespace).PriorityClass(class).
		Requests("cpu", "2", "memory", "64Mi").RequiredTerms(wrappers.Term(wrappers.In(v1.LabelHostname, nodes...))))
}

// markedByPreemption: the pod has the DisruptionTarget condition the
// scheduler sets on a victim before deleting it.
func markedByPreemption(p *v1.Pod) bool {
	c := util.PodCondition(p, v1.DisruptionTarget)
	return c != nil && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler
}

// expectUntouched checks every pod still exists as the same object, not
// deleting and not marked as a disruption target.
func (t *tester) expectUntouched(ctx context.Context, g gomega.Gomega, pods ...*v1.Pod) {
	for _, want := range pods {
		p, err := t.Client.CoreV1().Pods(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s", want.Name)
		g.Expect(p.UID).To(gomega.Equal(want.UID), "pod %s was replaced", want.Name)
		g.Expect(p.DeletionTimestamp).To(gomega.BeNil(), "pod %s is being deleted", want.Name)
		g.Expect(util.PodCondition(p, v1.DisruptionTarget)).To(gomega.BeNil(), "pod %s is marked as a disruption target", want.Name)
		g.Expect(p.Spec.NodeName).To(gomega.Equal(want.Spec.NodeName), "pod %s", want.Name)
	}
}

// gone returns the pods of pods that no longer exist.
func (t *tester) gone(ctx context.Context, g gomega.Gomega, pods ...*v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	for _, want := range pods {
		p, err := t.Client.CoreV1().Pods(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			out = append(out, want)
			continue
		}
		g.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s", want.Name)
		g.Expect(p.UID).To(gomega.Equal(want.UID), "pod %s was replaced", want.Name)
	}
	return out
}

// waitGone waits until exactly n of pods no longer exist, and returns those.
func (t *tester) waitGone(ctx context.Context, n int, pods ...*v1.Pod) []*v1.Pod {
	ginkgo.GinkgoHelper()
	var out []*v1.Pod
	framework.Eventually(ctx, func(g gomega.Gomega) {
		out = t.gone(ctx, g, pods...)
		g.Expect(names(out)).To(gomega.HaveLen(n), "of %v", names(pods))
	}).Should(gomega.Succeed())
	return out
}

// expectPreemptedEvents checks, inside an Eventually, that each victim has
// one Preempted event whose message contains every string of want.
func (t *tester) expectPreemptedEvents(ctx context.Context, g gomega.Gomega, victims []*v1.Pod, want ...string) {
	for _, v := range victims {
		events, err := t.Client.CoreV1().Events(t.Namespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": v.Name, "reason": "Preempted"}.String(),
		})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(events.Items).To(gomega.HaveLen(1), "Preempted events of victim %s", v.Name)
		for _, w := range want {
			g.Expect(events.Items[0].Message).To(gomega.ContainSubstring(w))
		}
	}
}

// deletePods deletes the pods at once, concurrently, and returns when
// every call has returned; a pod already gone is fine.
func (t *tester) deletePods(ctx context.Context, pods ...*v1.Pod) {
	ginkgo.GinkgoHelper()
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Go(func() {
			err := t.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To[int64](0),
				Preconditions:      &metav1.Preconditions{UID: &p.UID},
			})
			if !apierrors.IsNotFound(err) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting pod %s", pods[i].Name)
	}
}

func names(pods []*v1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// counters are the scheduler's preemption counters at one moment.
type counters struct {
	attempts, victims          float64
	success, failed, cancelled float64
}

func (c counters) String() string {
	return fmt.Sprintf("attempts=%v victims=%v executions{success=%v error=%v cancelled=%v}",
		c.attempts, c.victims, c.success, c.failed, c.cancelled)
}

// since is what the counters moved by after before.
func (c counters) since(before counters) counters {
	return counters{
		attempts: c.attempts - before.attempts, victims: c.victims - before.victims,
		success: c.success - before.success, failed: c.failed - before.failed, cancelled: c.cancelled - before.cancelled,
	}
}

func (t *tester) counters(ctx context.Context, g gomega.Gomega) counters {
	m, err := framework.SchedulerMetrics(ctx)
	g.Expect(err).NotTo(gomega.HaveOccurred(), "scraping kube-scheduler's metrics")
	return counters{
		attempts:  m.Value(metricAttempts),
		victims:   m.Value(metricVictims),
		success:   m.Value(metricExecutions, "result", "success"),
		failed:    m.Value(metricExecutions, "result", "error"),
		cancelled: m.Value(metricExecutions, "result", "cancelled"),
	}
}

// waitMoved waits until check passes on what the counters moved by since
// before, and returns that.
func (t *tester) waitMoved(ctx context.Context, before counters, check func(g gomega.Gomega, d counters)) counters {
	ginkgo.GinkgoHelper()
	var d counters
	framework.Eventually(ctx, func(g gomega.Gomega) {
		d = t.counters(ctx, g).since(before)
		check(g, d)
	}).Should(gomega.Succeed(), "the preemption counters")
	return d
}

// logMoved writes what the counters moved by since before to the spec's log.
func (t *tester) logMoved(ctx context.Context, before counters) {
	ginkgo.GinkgoWriter.Printf("preemption counters moved by %s\n", t.counters(ctx, gomega.Default).since(before))
}

// podEvent is one watch event of a pod.
type podEvent struct {
	typ watch.EventType
	pod *v1.Pod
}

// recorder keeps every watch event of the pods of a namespace.
type recorder struct {
	mu     sync.Mutex
	events []podEvent
}

// record watches the spec's pods from now until the spec ends.
func (t *tester) record(ctx context.Context) *recorder {
	ginkgo.GinkgoHelper()
	list, err := t.Client.CoreV1().Pods(t.Namespace).List(ctx, metav1.ListOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	w, err := t.Client.CoreV1().Pods(t.Namespace).Watch(context.WithoutCancel(ctx), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(w.Stop)
	r := &recorder{}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			r.mu.Lock()
			r.events = append(r.events, podEvent{typ: ev.Type, pod: p})
			r.mu.Unlock()
		}
	}()
	return r
}

// of returns the events of the pod of that UID, in order.
func (r *recorder) of(uid types.UID) []podEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []podEvent
	for _, ev := range r.events {
		if ev.pod.UID == uid {
			out = append(out, ev)
		}
	}
	return out
}

// expectMarkedThenDeleted checks the watch saw the victim get the
// DisruptionTarget condition, and only then go away.
func (r *recorder) expectMarkedThenDeleted(g gomega.Gomega, victim *v1.Pod) {
	events := r.of(victim.UID)
	var seen []string
	marked, deleted := -1, -1
	for i, ev := range events {
		seen = append(seen, fmt.Sprintf("%s(marked=%t,deleting=%t)", ev.typ, markedByPreemption(ev.pod), ev.pod.DeletionTimestamp != nil))
		if marked < 0 && ev.typ == watch.Modified && markedByPreemption(ev.pod) {
			marked = i
		}
		if ev.typ == watch.Deleted {
			deleted = i
		}
	}
	g.Expect(deleted).To(gomega.BeNumerically(">=", 0), "no deletion of victim %s seen: %v", victim.Name, seen)
	g.Expect(marked).To(gomega.BeNumerically(">=", 0), "victim %s was never marked as a disruption target: %v", victim.Name, seen)
	g.Expect(marked).To(gomega.BeNumerically("<", deleted), "victim %s was marked only after it was deleted: %v", victim.Name, seen)
	g.Expect(markedByPreemption(events[deleted].pod)).To(gomega.BeTrue(), "victim %s was deleted without the condition: %v", victim.Name, seen)
	// The condition stays in place from the update that set it to the deletion.
	for _, ev := range events[marked:deleted] {
		g.Expect(markedByPreemption(ev.pod)).To(gomega.BeTrue(), "victim %s lost its condition: %v", victim.Name, seen)
	}
}

// nominations returns the nominated nodes the watch saw on the pod, in
// order, without repeats.
func (r *recorder) nominations(uid types.UID) []string {
	var out []string
	for _, ev := range r.of(uid) {
		n := ev.pod.Status.NominatedNodeName
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

// undeletableLabel marks the pods denyDeletes protects.
const undeletableLabel = "e2e.gantry.dev/undeletable"

// denyDeletes makes kube-apiserver deny the deletion of the spec's pods
// labelled undeletableLabel=true (a ValidatingAdmissionPolicy and its
// binding), and waits until it does. The returned function lifts the
// denial and waits until it is lifted; it also runs after the spec.
func (t *tester) denyDeletes(ctx context.Context) (lift func(context.Context)) {
	ginkgo.GinkgoHelper()
	name := t.Namespace + "-undeletable"
	labels := map[string]string{framework.NamespaceLabel: t.Namespace}
	adm := t.Client.AdmissionregistrationV1()
	fail := admissionregistrationv1.Fail
	_, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "false",
				Message:    "e2e: pods labelled " + undeletableLabel + "=true may not be deleted",
			}},
		},
	}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating ValidatingAdmissionPolicy %s", name)
	_, err = adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1.LabelMetadataName: t.Namespace}},
				ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{undeletableLabel: "true"}},
			},
		},
	}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating ValidatingAdmissionPolicyBinding %s", name)

	// A probe pod that is never scheduled shows when the denial holds.
	probe := wrappers.MakePod("undeletable-probe", t.Namespace).Label(undeletableLabel, "true").Gated("e2e.gantry.dev/probe")
	t.CreatePod(ctx, probe)
	pods := t.Client.CoreV1().Pods(t.Namespace)
	framework.Eventually(ctx, func(g gomega.Gomega) {
		// Deleted while the denial did not hold yet: make it again.
		t.createPodIfGone(ctx, g, probe)
		err := pods.Delete(ctx, probe.Name, metav1.DeleteOptions{})
		g.Expect(err).To(gomega.HaveOccurred(), "the probe was deleted: the denial does not hold yet")
		g.Expect(err.Error()).To(gomega.ContainSubstring("may not be deleted"))
	}).Should(gomega.Succeed(), "kube-apiserver does not deny deletions yet")

	lifted := false
	lift = func(ctx context.Context) {
		if lifted {
			return
		}
		for _, del := range []func() error{
			func() error { return adm.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}) },
			func() error { return adm.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}) },
		} {
			if err := del(); !apierrors.IsNotFound(err) {
				gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting the denial %s", name)
			}
		}
		framework.Eventually(ctx, func(g gomega.Gomega) {
			err := pods.Delete(ctx, probe.Name, metav1.DeleteOptions{})
			if !apierrors.IsNotFound(err) {
				g.Expect(err).NotTo(gomega.HaveOccurred())
			}
		}).Should(gomega.Succeed(), "kube-apiserver still denies deletions")
		lifted = true
	}
	ginkgo.DeferCleanup(lift)
	return lift
}

// createPodIfGone creates p again when it no longer exists.
func (t *tester) createPodIfGone(ctx context.Context, g gomega.Gomega, p *wrappers.PodWrapper) {
	pods := t.Client.CoreV1().Pods(p.Namespace)
	_, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if err == nil {
		return
	}
	g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "getting pod %s: %v", p.Name, err)
	_, err = pods.Create(ctx, p.Obj(), metav1.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred(), "creating pod %s again", p.Name)
}

// waitReservationPhase waits until the reservation is in phase and returns it.
func (t *tester) waitReservationPhase(ctx context.Context, name string, phase schedv1alpha1.ReservationPhase) *schedv1alpha1.Reservation {
	ginkgo.GinkgoHelper()
	return utilgomega.Must(util.WaitForReservation(ctx, util.LongTimeout, t.Gantry, name, "in phase "+string(phase),
		func(r *schedv1alpha1.Reservation) bool { return r.Status.Phase == phase }))
}
