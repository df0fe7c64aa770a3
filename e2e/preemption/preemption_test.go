package preemption

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// Priorities of the specs' classes: fillers are low or mid, preemptors high.
const (
	lowPriority  = 100
	midPriority  = 200
	highPriority = 1000
)

var _ = framework.Describe("AsyncPreemption", ginkgo.Label(framework.LabelPreemption), ginkgo.Serial, func() {
	f := framework.NewFramework("preemption")
	t := newTester(f)

	ginkgo.It("preempts only the lowest-priority pods a high-priority pod needs, marking them before deleting them", func(ctx ginkgo.SpecContext) {
		node, other := t.nodes[0].Name, t.nodes[1].Name
		low := t.CreatePriorityClass(ctx, "low", lowPriority, "")
		mid := t.CreatePriorityClass(ctx, "mid", midPriority, "")
		high := t.CreatePriorityClass(ctx, "high", highPriority, "")

		ginkgo.By(fmt.Sprintf("filling %s with two low-priority and %d mid-priority one-CPU pods", node, t.cpus(node)-2))
		lows := t.fill(ctx, node, low, "low", 2, nil)
		mids := t.fill(ctx, node, mid, "mid", t.cpus(node)-2, nil)
		bystander := t.fill(ctx, other, low, "bystander", 1, nil)

		rec := t.record(ctx)
		before := t.counters(ctx, gomega.Default)
		ginkgo.By("creating a high-priority pod that needs two CPUs of " + node)
		preemptor := t.createPreemptor(ctx, "preemptor", high, node)
		gomega.Expect(preemptor.Spec.Priority).To(gomega.HaveValue(gomega.BeEquivalentTo(highPriority)))
		preemptor = t.WaitScheduled(ctx, promptly, preemptor.Name)
		gomega.Expect(preemptor.Spec.NodeName).To(gomega.Equal(node))
		ginkgo.GinkgoWriter.Printf("nominations of the preemptor seen: %q\n", rec.nominations(preemptor.UID))

		ginkgo.By("checking the two low-priority pods are gone and every other pod stays")
		t.waitGone(ctx, len(lows), lows...)
		t.expectUntouched(ctx, gomega.Default, append(mids, bystander...)...)

		ginkgo.By("checking each victim got the DisruptionTarget condition before its deletion")
		framework.Eventually(ctx, func(g gomega.Gomega) {
			for _, v := range lows {
				rec.expectMarkedThenDeleted(g, v)
			}
		}).Should(gomega.Succeed())

		ginkgo.By("checking each victim has a Preempted event naming the preemptor and the node")
		framework.Eventually(ctx, func(g gomega.Gomega) {
			t.expectPreemptedEvents(ctx, g, lows, string(preemptor.UID), node)
		}).Should(gomega.Succeed())

		ginkgo.By("checking the metrics count one successful preemption of two victims")
		t.waitMoved(ctx, before, func(g gomega.Gomega, d counters) {
			g.Expect(d.attempts).To(gomega.BeNumerically(">=", 1), "moved by %s", d)
			g.Expect(d.success).To(gomega.BeNumerically(">=", 1), "moved by %s", d)
			g.Expect(d.victims).To(gomega.BeEquivalentTo(len(lows)), "moved by %s", d)
			g.Expect(d.failed).To(gomega.BeZero(), "moved by %s", d)
			g.Expect(d.cancelled).To(gomega.BeZero(), "moved by %s", d)
		})
		t.logMoved(ctx, before)
	})

	ginkgo.It("spares pods a PodDisruptionBudget protects and preempts on another node", func(ctx ginkgo.SpecContext) {
		guardedNode, openNode := t.nodes[0].Name, t.nodes[1].Name
		low := t.CreatePriorityClass(ctx, "low", lowPriority, "")
		mid := t.CreatePriorityClass(ctx, "mid", midPriority, "")
		high := t.CreatePriorityClass(ctx, "high", highPriority, "")

		// Without the budget the guarded node would be chosen: its victims'
		// highest priority is the lower one (upstream's second criterion,
		// after the number of budget violations).
		ginkgo.By(fmt.Sprintf("filling %s with low-priority pods and %s with mid-priority pods", guardedNode, openNode))
		guarded := t.fill(ctx, guardedNode, low, "guarded", t.cpus(guardedNode), map[string]string{"app": "guarded"})
		open := t.fill(ctx, openNode, mid, "open", t.cpus(openNode), map[string]string{"app": "open"})

		// minAvailable, not maxUnavailable: the disruption controller counts
		// the expected pods of a maxUnavailable budget from their
		// controller's scale, and bare pods have none.
		ginkgo.By("protecting the pods of " + guardedNode + " with a budget that allows no disruption")
		pdbs := f.Client.PolicyV1().PodDisruptionBudgets(f.Namespace)
		all := intstr.FromInt32(int32(len(guarded)))
		_, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: &all,
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
			},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		expectBudget := func(g gomega.Gomega) {
			pdb, err := pdbs.Get(ctx, "guarded", metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(pdb.Status.ObservedGeneration).To(gomega.Equal(pdb.Generation), "status not computed yet: %+v", pdb.Status)
			g.Expect(pdb.Status.ExpectedPods).To(gomega.BeEquivalentTo(len(guarded)), "status: %+v", pdb.Status)
			g.Expect(pdb.Status.CurrentHealthy).To(gomega.BeEquivalentTo(len(guarded)), "status: %+v", pdb.Status)
			g.Expect(pdb.Status.DisruptionsAllowed).To(gomega.BeZero(), "status: %+v", pdb.Status)
		}
		framework.Eventually(ctx, expectBudget).Should(gomega.Succeed())

		before := t.counters(ctx, gomega.Default)
		ginkgo.By("creating a high-priority pod that needs two CPUs of either node")
		preemptor := t.createPreemptor(ctx, "preemptor", high, guardedNode, openNode)
		preemptor = t.WaitScheduled(ctx, promptly, preemptor.Name)
		gomega.Expect(preemptor.Spec.NodeName).To(gomega.Equal(openNode), "the preemptor did not go to the node without a budget")

		ginkgo.By("checking two pods of " + openNode + " were preempted and every guarded pod is untouched")
		t.waitGone(ctx, 2, open...)
		t.expectUntouched(ctx, gomega.Default, guarded...)
		expectBudget(gomega.Default)
		d := t.counters(ctx, gomega.Default).since(before)
		gomega.Expect(d.victims).To(gomega.BeEquivalentTo(2), "moved by %s", d)
		gomega.Expect(d.failed+d.cancelled).To(gomega.BeZero(), "moved by %s", d)
	})

	ginkgo.It("preempts a lower-priority Available reservation, which becomes Failed with reason Preempted", func(ctx ginkgo.SpecContext) {
		node := t.nodes[0].Name
		high := t.CreatePriorityClass(ctx, "high", highPriority, "")

		ginkgo.By(fmt.Sprintf("reserving %d CPUs of %s at low priority and one above the preemptor's, for pods that never come", t.cpus(node)-1, node))
		r := t.CreateReservation(ctx, wrappers.MakeReservation("low", "cpu", fmt.Sprint(t.cpus(node)-1), "memory", "64Mi").
			Priority(lowPriority).NodeSelector(v1.LabelHostname, node).OwnerPod(f.Namespace, "nobody"))
		t.waitReservationPhase(ctx, r.Name, schedv1alpha1.ReservationAvailable)
		guarded := t.CreateReservation(ctx, wrappers.MakeReservation("guarded", "cpu", "1", "memory", "64Mi").
			Priority(highPriority+1).NodeSelector(v1.LabelHostname, node).OwnerPod(f.Namespace, "nobody"))
		t.waitReservationPhase(ctx, guarded.Name, schedv1alpha1.ReservationAvailable)

		before := t.counters(ctx, gomega.Default)
		ginkgo.By("creating a high-priority pod that needs two CPUs of " + node)
		preemptor := t.createPreemptor(ctx, "preemptor", high, node)
		preemptor = t.WaitScheduled(ctx, promptly, preemptor.Name)
		gomega.Expect(preemptor.Spec.NodeName).To(gomega.Equal(node))

		ginkgo.By("checking the low-priority reservation is Failed, Preempted by the pod, and the other one stays")
		failed := t.waitReservationPhase(ctx, r.Name, schedv1alpha1.ReservationFailed)
		c := meta.FindStatusCondition(failed.Status.Conditions, schedv1alpha1.ConditionReady)
		gomega.Expect(c).NotTo(gomega.BeNil())
		gomega.Expect(c.Reason).To(gomega.Equal(schedv1alpha1.ReasonPreempted))
		gomega.Expect(c.Message).To(gomega.ContainSubstring(f.Namespace + "/" + preemptor.Name))
		gomega.Consistently(ctx, func(g gomega.Gomega) {
			got, err := t.Gantry.SchedulingV1alpha1().Reservations().Get(ctx, guarded.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(got.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable), "conditions %v", got.Status.Conditions)
		}).WithTimeout(3 * time.Second).Should(gomega.Succeed())
		t.waitMoved(ctx, before, func(g gomega.Gomega, d counters) {
			g.Expect(d.victims).To(gomega.BeEquivalentTo(1), "moved by %s", d)
			g.Expect(d.success).To(gomega.BeNumerically(">=", 1), "moved by %s", d)
		})
	})

	ginkgo.It("lets a pending high-priority reservation preempt the lower-priority pods it needs", func(ctx ginkgo.SpecContext) {
		node := t.nodes[0].Name
		low := t.CreatePriorityClass(ctx, "low", lowPriority, "")
		ginkgo.By(fmt.Sprintf("filling %s with %d low-priority one-CPU pods", node, t.cpus(node)))
		lows := t.fill(ctx, node, low, "low", t.cpus(node), nil)

		rec := t.record(ctx)
		ginkgo.By("reserving two CPUs of " + node + " at high priority")
		r := t.CreateReservation(ctx, wrappers.MakeReservation("high", "cpu", "2", "memory", "64Mi").
			Priority(highPriority).NodeSelector(v1.LabelHostname, node).OwnerPod(f.Namespace, "someone"))
		placed := t.waitReservationPhase(ctx, r.Name, schedv1alpha1.ReservationAvailable)
		gomega.Expect(placed.Status.NodeName).To(gomega.Equal(node))

		ginkgo.By("checking exactly two low-priority pods were preempted, marked then deleted, with events naming the reservation")
		victims := t.waitGone(ctx, 2, lows...)
		framework.Eventually(ctx, func(g gomega.Gomega) {
			for _, v := range victims {
				rec.expectMarkedThenDeleted(g, v)
			}
			t.expectPreemptedEvents(ctx, g, victims, "reservation "+r.Name)
		}).Should(gomega.Succeed())
		var kept []*v1.Pod
		for _, p := range lows {
			if !slices.Contains(names(victims), p.Name) {
				kept = append(kept, p)
			}
		}
		t.expectUntouched(ctx, gomega.Default, kept...)
	})

	ginkgo.It("leaves a pod with preemptionPolicy Never pending and preempts nothing", func(ctx ginkgo.SpecContext) {
		node := t.nodes[0].Name
		low := t.CreatePriorityClass(ctx, "low", lowPriority, "")
		never := t.CreatePriorityClass(ctx, "high-never", highPriority, v1.PreemptNever)
		fillers := t.fill(ctx, node, low, "low", t.cpus(node), nil)

		before := t.counters(ctx, gomega.Default)
		ginkgo.By("creating a high-priority pod that may not preempt and needs two CPUs of " + node)
		p := t.createPreemptor(ctx, "never", never, node)
		gomega.Expect(p.Spec.PreemptionPolicy).To(gomega.HaveValue(gomega.Equal(v1.PreemptNever)))
		t.WaitUnschedulable(ctx, p.Name, "Insufficient cpu", "preemptionPolicy=Never")
		t.expectNoPreemption(ctx, p, fillers, before)
	})

	ginkgo.It("schedules a preemptor promptly when its victims are deleted by someone else first", func(ctx ginkgo.SpecContext) {
		node := t.nodes[0].Name
		low := t.CreatePriorityClass(ctx, "low", lowPriority, "")
		high := t.CreatePriorityClass(ctx, "high", highPriority, "")
		rec := t.record(ctx)
		before := t.counters(ctx, gomega.Default)
		rounds := []struct {
			how          string
			onNomination bool
		}{
			{how: "deleting them right after creating the preemptor"},
			{how: "deleting them as soon as the preemptor is nominated", onNomination: true},
			{how: "deleting them right after creating the preemptor, again"},
		}
		var preemptors []string
		for i, r := range rounds {
			ginkgo.By(fmt.Sprintf("round %d: filling %s with low-priority pods, creating a high-priority pod that needs two CPUs there, and %s", i, node, r.how))
			fillers := t.fill(ctx, node, low, fmt.Sprintf("low-%d", i), t.cpus(node), nil)
			roundBefore := t.counters(ctx, gomega.Default)
			p := t.createPreemptor(ctx, fmt.Sprintf("preemptor-%d", i), high, node)
			preemptors = append(preemptors, p.Name)
			created := time.Now()
			if r.onNomination {
				gomega.Eventually(ctx, func() bool {
					for _, ev := range rec.of(p.UID) {
						if ev.pod.Status.NominatedNodeName != "" || ev.pod.Spec.NodeName != "" {
							return true
						}
					}
					return false
				}).WithPolling(5*time.Millisecond).WithTimeout(promptly).Should(gomega.BeTrue(), "the preemptor was neither nominated nor bound")
			}
			t.deletePods(ctx, fillers...)
			deleted := time.Since(created)
			p = t.WaitScheduled(ctx, promptly, p.Name)
			took := time.Since(created)
			gomega.Expect(p.Spec.NodeName).To(gomega.Equal(node))
			gomega.Expect(took).To(gomega.BeNumerically("<", promptly), "the preemptor took %s to be bound", took)
			ginkgo.GinkgoWriter.Printf("round %d: low-priority pods deleted %s after the preemptor's creation, preemptor bound after %s; nominations %q; counters moved by %s\n",
				i, deleted.Round(time.Millisecond), took.Round(time.Millisecond), rec.nominations(p.UID), t.counters(ctx, gomega.Default).since(roundBefore))

			ginkgo.By(fmt.Sprintf("round %d: emptying %s for the next round", i, node))
			t.deletePods(ctx, p)
			framework.ExpectIdle(ctx, t.nodes, nil)
		}

		ginkgo.By("checking preemption ran and no run of it failed")
		d := t.counters(ctx, gomega.Default).since(before)
		ginkgo.GinkgoWriter.Printf("preemption counters moved by %s over %d rounds\n", d, len(rounds))
		gomega.Expect(d.attempts).To(gomega.BeNumerically(">=", 1), "no preemptor ever went through PostFilter: the spec tested nothing (moved by %s)", d)
		gomega.Expect(d.failed).To(gomega.BeZero(), "moved by %s", d)
		gomega.Expect(d.cancelled).To(gomega.BeZero(), "moved by %s", d)
		log, err := framework.ComponentLog(framework.SchedulerComponent)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		var failures []string
		for _, line := range framework.LogLines(log, "Preemption failed") {
			for _, name := range preemptors {
				if strings.Contains(line, f.Namespace+"/"+name) {
					failures = append(failures, line)
				}
			}
		}
		gomega.Expect(failures).To(gomega.BeEmpty(), "the scheduler logged failed preemptions")
	})

	ginkgo.It("does not preempt pods of the same priority", func(ctx ginkgo.SpecContext) {
		node := t.nodes[0].Name
		mid := t.CreatePriorityClass(ctx, "mid", midPriority, "")
		fillers := t.fill(ctx, node, mid, "mid", t.cpus(node), nil)

		before := t.counters(ctx, gomega.Default)
		ginkgo.By("creating a pod of the same priority that needs two CPUs of " + node)
		p := t.createPreemptor(ctx, "peer", mid, node)
		gomega.Expect(p.Spec.PreemptionPolicy).To(gomega.HaveValue(gomega.Equal(v1.PreemptLowerPriority)))
		t.WaitUnschedulable(ctx, p.Name, "Insufficient cpu", "preemption: ")
		t.expectNoPreemption(ctx, p, fillers, before)
	})

	ginkgo.It("clears the nomination of a preemptor whose victims cannot be deleted, retries it, and succeeds once they can", func(ctx ginkgo.SpecContext) {
		high := t.CreatePriorityClass(ctx, "high", highPriority, "")
		node, fillers, lift := t.undeletableNode(ctx)
		rec := t.record(ctx)
		before := t.counters(ctx, gomega.Default)
		ginkgo.By("creating a high-priority pod that needs two CPUs of " + node)
		preemptor := t.createPreemptor(ctx, "preemptor", high, node)

		ginkgo.By("checking the preemption fails and is retried, and the nomination is cleared after a failure")
		t.waitMoved(ctx, before, func(g gomega.Gomega, d counters) {
			g.Expect(d.failed).To(gomega.BeNumerically(">=", 2), "the failed preemption was not retried: moved by %s", d)
		})
		framework.Eventually(ctx, func(g gomega.Gomega) {
			g.Expect(rec.nominations(preemptor.UID)).To(gomega.ContainElements(node, ""), "nominations seen")
			g.Expect(clearedAfterNomination(rec.nominations(preemptor.UID), node)).To(gomega.BeTrue(),
				"the nomination was never cleared: nominations seen %q", rec.nominations(preemptor.UID))
		}).Should(gomega.Succeed())
		d := t.counters(ctx, gomega.Default).since(before)
		gomega.Expect(d.victims).To(gomega.BeZero(), "moved by %s", d)
		gomega.Expect(d.success).To(gomega.BeZero(), "moved by %s", d)
		p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, preemptor.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "the preemptor was bound on a full node")
		gomega.Expect(t.gone(ctx, gomega.Default, fillers...)).To(gomega.BeEmpty(), "a pod was deleted despite the denial")
		ginkgo.GinkgoWriter.Printf("while denied: counters moved by %s; nominations %q\n", d, rec.nominations(preemptor.UID))

		ginkgo.By("lifting the denial")
		lift(ctx)
		lifted := time.Now()
		preemptor = t.WaitScheduled(ctx, promptly, preemptor.Name)
		gomega.Expect(preemptor.Spec.NodeName).To(gomega.Equal(node))
		ginkgo.GinkgoWriter.Printf("preemptor bound %s after the denial was lifted\n", time.Since(lifted).Round(time.Millisecond))

		ginkgo.By("checking two low-priority pods were preempted and the metrics count them once")
		t.waitGone(ctx, 2, fillers...)
		t.waitMoved(ctx, before, func(g gomega.Gomega, d counters) {
			g.Expect(d.success).To(gomega.BeNumerically(">=", 1), "moved by %s", d)
			g.Expect(d.victims).To(gomega.BeEquivalentTo(2), "moved by %s", d)
			g.Expect(d.cancelled).To(gomega.BeZero(), "moved by %s", d)
		})
		t.logMoved(ctx, before)
	})

	ginkgo.It("spaces the retries of a failing preemption by its backoff", func(ctx ginkgo.SpecContext) {
		high := t.CreatePriorityClass(ctx, "high", highPriority, "")
		node, _, _ := t.undeletableNode(ctx)
		before := t.counters(ctx, gomega.Default)
		ginkgo.By("creating a high-priority pod that needs two CPUs of " + node)
		t.createPreemptor(ctx, "preemptor", high, node)

		ginkgo.By("waiting for the first failed preemption")
		t.waitMoved(ctx, before, func(g gomega.Gomega, d counters) {
			g.Expect(d.failed).To(gomega.BeNumerically(">=", 1), "moved by %s", d)
		})
		// The executor retries after 1s, then 2s, 4s, … (10s at most): in
		// the 2.5s after the first failure (seen up to one poll late) two
		// more fail at most.
		ginkgo.By(fmt.Sprintf("checking for %s that the retries wait for the backoff", backoffWindow))
		gomega.Consistently(ctx, func(g gomega.Gomega) {
			d := t.counters(ctx, g).since(before)
			g.Expect(d.failed).To(gomega.BeNumerically("<=", 3),
				"failed preemptions are retried without the backoff (1s, 2s, 4s, …): moved by %s", d)
		}).WithPolling(100 * time.Millisecond).WithTimeout(backoffWindow).Should(gomega.Succeed())
		t.waitMoved(ctx, before, func(g gomega.Gomega, d counters) {
			g.Expect(d.failed).To(gomega.BeNumerically(">=", 2), "the failed preemption was not retried: moved by %s", d)
		})
		t.logMoved(ctx, before)
	})
})

// expectNoPreemption checks that the scheduler's PostFilter ran for the
// pending pod, and that, while it runs again (a pod deleted elsewhere
// requeues the pod), the pod stays pending without a nomination and none of
// others is touched, and no preemption runs.
func (t *tester) expectNoPreemption(ctx context.Context, pending *v1.Pod, others []*v1.Pod, before counters) {
	ginkgo.GinkgoHelper()
	ginkgo.By("checking PostFilter ran for the pod")
	t.waitMoved(ctx, before, func(g gomega.Gomega, d counters) {
		g.Expect(d.attempts).To(gomega.BeNumerically(">=", 1), "moved by %s", d)
	})

	ginkgo.By("requeueing the pod: a pod is bound to another node and deleted")
	other := t.nodes[1].Name
	nudge := t.CreatePod(ctx, wrappers.MakePod("nudge", t.Namespace).Requests("cpu", "100m").OnNode(other))
	t.WaitForPod(ctx, util.LongTimeout, nudge.Name, "bound to "+other, func(p *v1.Pod) bool { return p.Spec.NodeName == other })
	t.deletePods(ctx, nudge)
	t.waitMoved(ctx, before, func(g gomega.Gomega, d counters) {
		g.Expect(d.attempts).To(gomega.BeNumerically(">=", 2), "PostFilter did not run again for the requeued pod: moved by %s", d)
	})

	ginkgo.By(fmt.Sprintf("checking for %s that the pod stays pending and unnominated, and nothing is preempted", quiet))
	gomega.Consistently(ctx, func(g gomega.Gomega) {
		p, err := t.Client.CoreV1().Pods(pending.Namespace).Get(ctx, pending.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "the pod was bound")
		g.Expect(p.Status.NominatedNodeName).To(gomega.BeEmpty(), "the pod was nominated")
		t.expectUntouched(ctx, g, others...)
		d := t.counters(ctx, g).since(before)
		g.Expect(d.victims).To(gomega.BeZero(), "moved by %s", d)
		g.Expect(d.success+d.failed+d.cancelled).To(gomega.BeZero(), "a preemption ran: moved by %s", d)
	}).WithPolling(time.Second).WithTimeout(quiet).Should(gomega.Succeed())
	t.logMoved(ctx, before)
}

// clearedAfterNomination: in the nominations seen, one to node is later
// cleared.
func clearedAfterNomination(nominations []string, node string) bool {
	nominated := false
	for _, n := range nominations {
		switch {
		case n == node:
			nominated = true
		case n == "" && nominated:
			return true
		}
	}
	return false
}

// backoffWindow is how long the backoff spec counts retries after the
// first failure.
const backoffWindow = 2500 * time.Millisecond

// undeletableNode fills the first node with low-priority pods whose
// deletion kube-apiserver denies until lift is called (also after the
// spec); it returns the node, the pods and lift.
func (t *tester) undeletableNode(ctx context.Context) (string, []*v1.Pod, func(context.Context)) {
	ginkgo.GinkgoHelper()
	node := t.nodes[0].Name
	low := t.CreatePriorityClass(ctx, "low", lowPriority, "")
	fillers := t.fill(ctx, node, low, "low", t.cpus(node), map[string]string{undeletableLabel: "true"})
	ginkgo.By("denying the deletion of the low-priority pods on " + node)
	return node, fillers, t.denyDeletes(ctx)
}
