package preemption

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	. "github.com/gantry-dev/gantry/test/wrappers" // builders read as a DSL
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
)

const (
	// specLabel marks the priority classes of a spec with its namespace
	// (they are cluster-scoped).
	specLabel = "e2e.gantry.dev/namespace"

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

// tester is what every spec of the suite works with: its namespace and
// clients, and the cluster's nodes.
type tester struct {
	f *framework.Framework
	// nodes are the cluster's kwok nodes, by name.
	nodes []corev1.Node
}

// newTester registers, after the framework's, the setup of every spec:
// wait for the kwok nodes to be empty, and remove the spec's pods after it.
func newTester(f *framework.Framework) *tester {
	t := &tester{f: f}
	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		framework.RequireLocal("the specs read kube-scheduler's preemption metrics")
		list, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodes.ManagedLabel + "=true"})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(len(list.Items)).To(gomega.BeNumerically(">=", 2), "the suite needs two kwok nodes")
		t.nodes = list.Items
		slices.SortFunc(t.nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
		for i := range t.nodes[:2] {
			gomega.Expect(t.cpus(t.nodes[i].Name)).To(gomega.BeNumerically(">=", 3),
				"node %s is too small to fill with one-CPU pods and preempt two", t.nodes[i].Name)
		}
		ginkgo.DeferCleanup(t.cleanup)
		t.expectIdle(ctx)
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

// expectIdle waits until no pod is bound to a kwok node, and the
// scheduler's cache agrees: a spec fills nodes from zero.
func (t *tester) expectIdle(ctx context.Context) {
	framework.Eventually(ctx, func(g gomega.Gomega) {
		pods, err := t.f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		var bound []string
		for _, p := range pods.Items {
			if slices.ContainsFunc(t.nodes, func(n corev1.Node) bool { return n.Name == p.Spec.NodeName }) {
				bound = append(bound, p.Namespace+"/"+p.Name)
			}
		}
		g.Expect(bound).To(gomega.BeEmpty(), "pods left on the kwok nodes")
		for _, n := range t.nodes {
			v := &nodeView{}
			g.Expect(framework.SchedulerGetJSON(ctx, "/apis/v1/nodes/"+n.Name, v)).To(gomega.Succeed())
			g.Expect(v.Pods).To(gomega.BeEmpty(), "the scheduler's cache still has pods on %s", n.Name)
		}
	}).WithOffset(1).Should(gomega.Succeed(), "the kwok nodes are not empty")
}

// nodeView is the part of the scheduler's /apis/v1/nodes/{node} this suite reads.
type nodeView struct {
	Pods []struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"pods"`
}

// cleanup writes the scheduler's view of the spec when it failed (the
// framework dumps the namespace); when it passed, it removes the spec's
// pods at once (the framework then deletes the namespace).
func (t *tester) cleanup(ctx ginkgo.SpecContext) {
	if ginkgo.CurrentSpecReport().Failed() {
		t.dump(ctx)
		return
	}
	t.f.DeletePods(ctx)
}

// dump writes the scheduler's preemption metrics, and the lines of its log
// about the spec's namespace, into the spec's artifacts.
func (t *tester) dump(ctx context.Context) {
	write := func(file, text string) { framework.WriteSpecArtifact(file, []byte(text)) }
	if m, err := framework.SchedulerMetrics(ctx); err == nil {
		var lines []string
		for k, v := range m {
			if strings.HasPrefix(k, "gantry_preemption_") {
				lines = append(lines, fmt.Sprintf("%s %v", k, v))
			}
		}
		slices.Sort(lines)
		write("scheduler-metrics.txt", strings.Join(lines, "\n")+"\n")
	}
	if log, err := framework.ComponentLog(framework.SchedulerComponent); err == nil {
		write("kube-scheduler.log", strings.Join(linesAbout(log, t.f.Namespace+"/"), "\n")+"\n")
	}
	ginkgo.GinkgoWriter.Printf("scheduler metrics and log lines of the spec written to %s\n", framework.SpecArtifacts())
}

// linesAbout returns the lines of log that contain s.
func linesAbout(log, s string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// priorityClass creates a PriorityClass under a name unique to the spec
// and deletes it after the spec; it returns the name.
func (t *tester) priorityClass(ctx context.Context, short string, value int32, policy corev1.PreemptionPolicy) string {
	pc := &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:   t.f.Namespace + "-" + short,
			Labels: map[string]string{specLabel: t.f.Namespace},
		},
		Value:       value,
		Description: "e2e preemption suite",
	}
	if policy != "" {
		pc.PreemptionPolicy = &policy
	}
	_, err := t.f.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred(), "creating PriorityClass %s", pc.Name)
	ginkgo.DeferCleanup(func(ctx context.Context) {
		err := t.f.Client.SchedulingV1().PriorityClasses().Delete(ctx, pc.Name, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting PriorityClass %s", pc.Name)
		}
	})
	return pc.Name
}

// createPod creates p in the spec's namespace; it goes away at once when
// deleted. A PriorityClass created moments before may not be known yet to
// kube-apiserver's Priority admission (it reads them from an informer), so
// that one refusal is retried.
func (t *tester) createPod(ctx context.Context, p *PodWrapper) *corev1.Pod {
	p.Namespace = t.f.Namespace
	p.NoGrace()
	var created *corev1.Pod
	framework.Eventually(ctx, func() error {
		var err error
		created, err = t.f.Client.CoreV1().Pods(t.f.Namespace).Create(ctx, p.Obj(), metav1.CreateOptions{})
		if err != nil && !(apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name")) {
			return gomega.StopTrying("creating pod " + p.Name).Wrap(err)
		}
		return err
	}).WithOffset(1).Should(gomega.Succeed(), "creating pod %s", p.Name)
	return created
}

// fill creates n one-CPU pods of priority class class, named prefix-0…,
// with labels, pinned to node, and waits until all are bound there.
func (t *tester) fill(ctx context.Context, node, class, prefix string, n int, labels map[string]string) []*corev1.Pod {
	names := make([]string, 0, n)
	for i := range n {
		p := MakePod(fmt.Sprintf("%s-%d", prefix, i), t.f.Namespace).PriorityClass(class).
			Requests("cpu", "1", "memory", "64Mi").OnNode(node)
		for k, v := range labels {
			p.Label(k, v)
		}
		names = append(names, t.createPod(ctx, p).Name)
	}
	out := make([]*corev1.Pod, 0, n)
	for _, name := range names {
		p := t.waitPod(ctx, name, framework.DefaultTimeout, func(g gomega.Gomega, p *corev1.Pod) {
			g.Expect(p.Spec.NodeName).To(gomega.Equal(node), "not bound to %s; conditions %v", node, p.Status.Conditions)
		})
		out = append(out, p)
	}
	return out
}

// waitPod waits up to timeout until check passes on pod name and returns
// the pod.
func (t *tester) waitPod(ctx context.Context, name string, timeout time.Duration, check func(g gomega.Gomega, p *corev1.Pod)) *corev1.Pod {
	var p *corev1.Pod
	framework.Eventually(ctx, func(g gomega.Gomega) {
		var err error
		p, err = t.f.Client.CoreV1().Pods(t.f.Namespace).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		check(g, p)
	}).WithTimeout(timeout).WithOffset(1).Should(gomega.Succeed(), "pod %s", name)
	return p
}

// waitScheduled waits until the pod is bound (within promptly of the
// call) and returns it.
func (t *tester) waitScheduled(ctx context.Context, name string) *corev1.Pod {
	start := time.Now()
	p := t.waitPod(ctx, name, promptly, func(g gomega.Gomega, p *corev1.Pod) {
		g.Expect(p.Spec.NodeName).NotTo(gomega.BeEmpty(), "not bound within %s; nominated to %q; conditions %v",
			promptly, p.Status.NominatedNodeName, p.Status.Conditions)
	})
	ginkgo.GinkgoWriter.Printf("pod %s bound to %s, seen %s after the wait began\n", name, p.Spec.NodeName, time.Since(start).Round(10*time.Millisecond))
	return p
}

// waitUnschedulable waits until the scheduler has found no node for the pod
// and said so, with a message containing every string of want.
func (t *tester) waitUnschedulable(ctx context.Context, name string, want ...string) *corev1.Pod {
	return t.waitPod(ctx, name, framework.DefaultTimeout, func(g gomega.Gomega, p *corev1.Pod) {
		g.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "pod %s was bound", p.Name)
		c := podCondition(p, corev1.PodScheduled)
		g.Expect(c).NotTo(gomega.BeNil(), "pod %s has no PodScheduled condition yet", p.Name)
		g.Expect(c.Status).To(gomega.Equal(corev1.ConditionFalse))
		g.Expect(c.Reason).To(gomega.Equal(corev1.PodReasonUnschedulable))
		for _, w := range want {
			g.Expect(c.Message).To(gomega.ContainSubstring(w))
		}
	})
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// markedByPreemption: the pod has the DisruptionTarget condition the
// scheduler sets on a victim before deleting it.
func markedByPreemption(p *corev1.Pod) bool {
	c := podCondition(p, corev1.DisruptionTarget)
	return c != nil && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler
}

// expectUntouched checks every pod still exists as the same object, not
// deleting and not marked as a disruption target.
func (t *tester) expectUntouched(ctx context.Context, g gomega.Gomega, pods ...*corev1.Pod) {
	for _, want := range pods {
		p, err := t.f.Client.CoreV1().Pods(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s", want.Name)
		g.Expect(p.UID).To(gomega.Equal(want.UID), "pod %s was replaced", want.Name)
		g.Expect(p.DeletionTimestamp).To(gomega.BeNil(), "pod %s is being deleted", want.Name)
		g.Expect(podCondition(p, corev1.DisruptionTarget)).To(gomega.BeNil(), "pod %s is marked as a disruption target", want.Name)
		g.Expect(p.Spec.NodeName).To(gomega.Equal(want.Spec.NodeName), "pod %s", want.Name)
	}
}

// gone returns the pods of pods that no longer exist.
func (t *tester) gone(ctx context.Context, g gomega.Gomega, pods ...*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, want := range pods {
		p, err := t.f.Client.CoreV1().Pods(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			out = append(out, want)
			continue
		}
		g.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s", want.Name)
		g.Expect(p.UID).To(gomega.Equal(want.UID), "pod %s was replaced", want.Name)
	}
	return out
}

// deletePods deletes the pods at once, concurrently, and returns when
// every call has returned; a pod already gone is fine.
func (t *tester) deletePods(ctx context.Context, pods ...*corev1.Pod) {
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Go(func() {
			err := t.f.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
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
		gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred(), "deleting pod %s", pods[i].Name)
	}
}

func names(pods []*corev1.Pod) []string {
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

// podEvent is one watch event of a pod.
type podEvent struct {
	typ watch.EventType
	pod *corev1.Pod
}

// recorder keeps every watch event of the pods of a namespace.
type recorder struct {
	mu     sync.Mutex
	events []podEvent
}

// record watches the spec's pods from now until the spec ends.
func (t *tester) record(ctx context.Context) *recorder {
	list, err := t.f.Client.CoreV1().Pods(t.f.Namespace).List(ctx, metav1.ListOptions{})
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	w, err := t.f.Client.CoreV1().Pods(t.f.Namespace).Watch(context.WithoutCancel(ctx), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(w.Stop)
	r := &recorder{}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
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
func (r *recorder) expectMarkedThenDeleted(g gomega.Gomega, victim *corev1.Pod) {
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
	name := t.f.Namespace + "-undeletable"
	labels := map[string]string{specLabel: t.f.Namespace}
	adm := t.f.Client.AdmissionregistrationV1()
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
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred(), "creating ValidatingAdmissionPolicy %s", name)
	_, err = adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: t.f.Namespace}},
				ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{undeletableLabel: "true"}},
			},
		},
	}, metav1.CreateOptions{})
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred(), "creating ValidatingAdmissionPolicyBinding %s", name)

	// A probe pod that is never scheduled shows when the denial holds.
	probe := t.createPod(ctx, MakePod("undeletable-probe", t.f.Namespace).Label(undeletableLabel, "true").Gated("e2e.gantry.dev/probe"))
	pods := t.f.Client.CoreV1().Pods(t.f.Namespace)
	framework.Eventually(ctx, func(g gomega.Gomega) {
		// Deleted while the denial did not hold yet: make it again.
		probe = t.createPodIfGone(ctx, g, probe)
		err := pods.Delete(ctx, probe.Name, metav1.DeleteOptions{})
		g.Expect(err).To(gomega.HaveOccurred(), "the probe was deleted: the denial does not hold yet")
		g.Expect(err.Error()).To(gomega.ContainSubstring("may not be deleted"))
	}).WithOffset(1).Should(gomega.Succeed(), "kube-apiserver does not deny deletions yet")

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

// createPodIfGone creates p again, without its server-set fields, when it
// no longer exists, and returns the live pod.
func (t *tester) createPodIfGone(ctx context.Context, g gomega.Gomega, p *corev1.Pod) *corev1.Pod {
	pods := t.f.Client.CoreV1().Pods(p.Namespace)
	live, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if err == nil {
		return live
	}
	g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "getting pod %s: %v", p.Name, err)
	live, err = pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels},
		Spec:       *p.Spec.DeepCopy(),
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred(), "creating pod %s again", p.Name)
	return live
}

// createReservation creates a reservation named after the spec and deletes
// it after the spec.
func (t *tester) createReservation(ctx context.Context, r *ReservationWrapper) *schedv1alpha1.Reservation {
	gc, err := framework.GantryClient()
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	rsv := gc.SchedulingV1alpha1().Reservations()
	r.Name = t.f.Namespace + "-" + r.Name
	r.Label(specLabel, t.f.Namespace)
	created, err := rsv.Create(ctx, r.Obj(), metav1.CreateOptions{})
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred(), "creating reservation %s", r.Name)
	ginkgo.DeferCleanup(func(ctx context.Context) {
		if err := rsv.Delete(ctx, created.Name, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting reservation %s", created.Name)
		}
	})
	return created
}

// waitReservationPhase waits until the reservation is in phase and returns it.
func (t *tester) waitReservationPhase(ctx context.Context, name string, phase schedv1alpha1.ReservationPhase) *schedv1alpha1.Reservation {
	gc, err := framework.GantryClient()
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	var r *schedv1alpha1.Reservation
	framework.Eventually(ctx, func(g gomega.Gomega) {
		r, err = gc.SchedulingV1alpha1().Reservations().Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(r.Status.Phase).To(gomega.Equal(phase), "reservation %s: conditions %v", name, r.Status.Conditions)
	}).WithOffset(1).Should(gomega.Succeed(), "reservation %s", name)
	return r
}
