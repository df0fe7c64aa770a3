package kueue

import (
	"context"
	"fmt"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	kueueapi "github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/test/wrappers"
)

var _ = framework.Describe("Kueue's ProvisioningRequest admission check served by gantry-provisioner", ginkgo.Label(framework.LabelKueue), ginkgo.Serial, func() {
	f := framework.NewFramework("kueue")
	var e *env

	ginkgo.BeforeEach(func() {
		e = newEnv(f)
		// Registered first, so it runs after the spec's own cleanups.
		e.leaveNothing()
	})

	ginkgo.It("admits ten concurrent check-capacity Jobs whose pods finish at once, twice, and ends every booking", ginkgo.Label(framework.LabelKindSample), func(ctx ginkgo.SpecContext) {
		e.queue(ctx, queueOptions{class: provv1.ClassCheckCapacity, cpu: "100"})
		const jobs = 10
		for round := range 2 {
			start := time.Now()
			var names []string
			for i := range jobs {
				name := fmt.Sprintf("fast-%d-%d", round, i)
				e.job(ctx, name, jobOptions{pods: 3, cpu: "100m"})
				names = append(names, name)
			}
			e.waitJobsComplete(ctx, names...)
			ginkgo.GinkgoWriter.Printf("round %d: %d Jobs of 3 pods admitted and complete in %s\n", round, jobs, time.Since(start).Round(time.Millisecond))
			e.expectBookingsEnded(ctx, jobs*(round+1), provisioning.ReasonCapacityBookingConsumed)
		}
	})

	ginkgo.It("admits check-capacity Jobs whose pods run for a while, and ends their bookings while the pods still run", func(ctx ginkgo.SpecContext) {
		e.queue(ctx, queueOptions{class: provv1.ClassCheckCapacity, cpu: "100"})
		const jobs, pods = 3, 2
		var names []string
		for i := range jobs {
			name := fmt.Sprintf("long-%d", i)
			e.job(ctx, name, jobOptions{pods: pods, cpu: "100m", runFor: 20 * time.Second})
			names = append(names, name)
		}
		// A booking ends once its pods have come, not when they finish.
		e.expectBookingsEnded(ctx, jobs, provisioning.ReasonCapacityBookingConsumed)
		list, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(list.Items).To(gomega.HaveLen(jobs * pods))
		for _, p := range list.Items {
			gomega.Expect(p.Status.Phase).To(gomega.Equal(v1.PodRunning), "pod %s on %s", p.Name, p.Spec.NodeName)
		}
		e.waitJobsComplete(ctx, names...)
	})

	ginkgo.It("admits a check-capacity Job whose pods fail and are replaced, and ends its booking once", func(ctx ginkgo.SpecContext) {
		e.queue(ctx, queueOptions{class: provv1.ClassCheckCapacity, cpu: "100"})
		const pods = 3
		e.job(ctx, "failing", jobOptions{pods: pods, cpu: "100m", failFirstAttempt: true})
		e.waitJobsComplete(ctx, "failing")
		list, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		phases := map[v1.PodPhase]int{}
		for _, p := range list.Items {
			phases[p.Status.Phase]++
		}
		gomega.Expect(phases).To(gomega.Equal(map[v1.PodPhase]int{v1.PodFailed: pods, v1.PodSucceeded: pods}),
			"every index failed once, then its replacement succeeded")
		e.expectBookingsEnded(ctx, 1, provisioning.ReasonCapacityBookingConsumed)
	})

	ginkgo.It("releases the booking of a workload Kueue preempts before its pods came, and admits the workload that preempted it", func(ctx ginkgo.SpecContext) {
		// Room for one of the two Jobs in the ClusterQueue's quota; the
		// higher WorkloadPriorityClass preempts the lower.
		e.queue(ctx, queueOptions{class: provv1.ClassCheckCapacity, cpu: "1",
			preemption: map[string]any{"withinClusterQueue": "LowerPriority"}})
		low := e.workloadPriorityClass(ctx, "low", 10)
		high := e.workloadPriorityClass(ctx, "high", 1000)
		// The low Job's pods are gated: admitted, its booking waits for
		// pods that do not come.
		e.job(ctx, "low", jobOptions{pods: 2, cpu: "500m", workloadPriority: low, gate: true})
		var lowRequest string
		framework.Eventually(ctx, func(g gomega.Gomega) {
			wl := e.workloadOf(ctx, "low")
			g.Expect(wl).NotTo(gomega.BeNil(), "no Workload for Job low")
			g.Expect(kueueapi.ConditionStatus(wl, "Admitted")).To(gomega.Equal("True"), "Workload of Job low: %v", wl.Object["status"])
			prs := e.requests(ctx)
			g.Expect(prs).To(gomega.HaveLen(1))
			g.Expect(meta.IsStatusConditionTrue(prs[0].Status.Conditions, provv1.ConditionProvisioned)).To(gomega.BeTrue())
			lowRequest = prs[0].Name
		}).Should(gomega.Succeed())
		gomega.Expect(e.reservations(ctx)).NotTo(gomega.BeEmpty(), "the low Job's booking")

		e.job(ctx, "high", jobOptions{pods: 1, cpu: "1", workloadPriority: high})
		var ended string
		framework.Eventually(ctx, func(g gomega.Gomega) {
			pr, err := f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, lowRequest, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionBookingExpired)
			g.Expect(c).NotTo(gomega.BeNil(), "request %s: %v", pr.Name, pr.Status.Conditions)
			g.Expect(c.Reason).To(gomega.Equal(provisioning.ReasonWorkloadEvicted), "request %s: %s", pr.Name, c.Message)
			ended = c.Message
			for _, r := range e.reservations(ctx) {
				g.Expect(r.Annotations[provisioning.AnnotationRequest]).NotTo(gomega.Equal(f.Namespace+"/"+lowRequest), "Reservation %s of the evicted workload", r.Name)
			}
		}).Should(gomega.Succeed())
		ginkgo.GinkgoWriter.Printf("request %s: %s\n", lowRequest, ended)
		e.waitJobsComplete(ctx, "high")
	})

	ginkgo.It("books a Job at its PriorityClass's priority", func(ctx ginkgo.SpecContext) {
		e.queue(ctx, queueOptions{class: provv1.ClassCheckCapacity, cpu: "100"})
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: f.Namespace + "-high"}, Value: 100000}
		_, err := f.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = f.Client.SchedulingV1().PriorityClasses().Delete(ctx, pc.Name, metav1.DeleteOptions{})
		})
		e.expectBookedAt(ctx, "high", jobOptions{pods: 2, cpu: "100m", priority: pc.Name}, pc.Value)
	})

	ginkgo.It("books a Job at its WorkloadPriorityClass's priority, not its pods'", func(ctx ginkgo.SpecContext) {
		e.queue(ctx, queueOptions{class: provv1.ClassCheckCapacity, cpu: "100"})
		wpc := e.workloadPriorityClass(ctx, "urgent", 5000)
		e.expectBookedAt(ctx, "urgent", jobOptions{pods: 2, cpu: "100m", workloadPriority: wpc}, 5000)
	})

	ginkgo.It("admits a Job after a best-effort-atomic scale-up, lands its pods on the new nodes, and removes the nodes with the Job", ginkgo.Label(framework.LabelKindSample), func(ctx ginkgo.SpecContext) {
		e.queue(ctx, queueOptions{class: provv1.ClassBestEffortAtomicScaleUp, cpu: "100"})
		start := time.Now()
		// A pod of 6 CPUs takes a node of the general group (8 CPUs) alone.
		e.job(ctx, "atomic", jobOptions{pods: 4, cpu: "6", nodeGroup: "general"})
		e.waitJobsComplete(ctx, "atomic")
		ginkgo.GinkgoWriter.Printf("4 pods of 6 CPUs: Job created to complete in %s\n", time.Since(start).Round(time.Millisecond))
		// The attempt added a node per pod. A pod may land on a node of the
		// attempt that an earlier pod of the Job, finished at once, left.
		prs := e.requests(ctx)
		gomega.Expect(prs).To(gomega.HaveLen(1))
		details := prs[0].Status.ProvisioningClassDetails
		attempt := string(details[provisioning.DetailScaleUpAttempt])
		gomega.Expect(attempt).NotTo(gomega.BeEmpty(), "the request names no scale-up attempt: %v", details)
		gomega.Expect(string(details[provisioning.DetailScaleUpPlan])).To(gomega.Equal("general=4"), "the attempt's plan")
		pods, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(pods.Items).To(gomega.HaveLen(4))
		for _, p := range pods.Items {
			n, err := f.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s", p.Name)
			gomega.Expect(n.Labels).To(gomega.HaveKeyWithValue(nodegroups.LabelAttempt, attempt), "pod %s on node %s", p.Name, n.Name)
		}
		e.expectBookingsEnded(ctx, 1, provisioning.ReasonCapacityBookingConsumed)
	})

	ginkgo.It("admits a Job that must fit in one zone through Kueue's topology-aware scheduling after its booking, and ends the booking when the pods land where Kueue put them", func(ctx ginkgo.SpecContext) {
		// The cluster's kwok nodes carry a zone and a hostname.
		topology := e.topology(ctx, v1.LabelTopologyZone, v1.LabelHostname)
		e.queue(ctx, queueOptions{class: provv1.ClassCheckCapacity, cpu: "100", topology: topology, nodeLabels: map[string]string{"type": "kwok"}})
		// Kueue's topology-aware scheduling does not see Reservations. One
		// holding all of the first kwok node, which Kueue picks on an
		// idle cluster, sends the booking elsewhere, while Kueue still gives
		// the pods a node of its own choosing; it goes once the request is
		// Provisioned, and the pods then fit there.
		first := nodes.NamePrefix + "0"
		blocker := f.CreateReservation(ctx, wrappers.MakeReservation("blocker", "cpu", "4").NodeName(first).OwnerPod(f.Namespace, "never"))
		framework.Eventually(ctx, func(g gomega.Gomega) {
			r, err := f.Gantry.SchedulingV1alpha1().Reservations().Get(ctx, blocker.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable))
		}).Should(gomega.Succeed())
		const pods = 3
		e.job(ctx, "tas", jobOptions{pods: pods, cpu: "100m", requiredTopology: v1.LabelTopologyZone})
		booked := map[string]bool{}
		framework.Eventually(ctx, func(g gomega.Gomega) {
			prs := e.requests(ctx)
			g.Expect(prs).To(gomega.HaveLen(1))
			g.Expect(meta.IsStatusConditionTrue(prs[0].Status.Conditions, provv1.ConditionProvisioned)).To(gomega.BeTrue(), "request %s: %v", prs[0].Name, prs[0].Status.Conditions)
			for _, r := range e.reservations(ctx) {
				booked[r.Status.NodeName] = true
			}
		}).Should(gomega.Succeed())
		gomega.Expect(booked).NotTo(gomega.HaveKey(first), "the booking is on the blocked node")
		gomega.Expect(f.Gantry.SchedulingV1alpha1().Reservations().Delete(ctx, blocker.Name, metav1.DeleteOptions{})).To(gomega.Succeed())
		e.waitJobsComplete(ctx, "tas")

		// Kueue assigned the topology once the request was Provisioned (its
		// delayed topology request), not when it reserved quota.
		wl := e.workloadOf(ctx, "tas")
		gomega.Expect(wl).NotTo(gomega.BeNil())
		psas, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
		gomega.Expect(psas).To(gomega.HaveLen(1), "Workload %s: %v", wl.GetName(), wl.Object["status"])
		psa, _ := psas[0].(map[string]any)
		gomega.Expect(psa).To(gomega.HaveKeyWithValue("delayedTopologyRequest", "Ready"), "pod set assignment")
		levels, _, _ := unstructured.NestedStringSlice(psa, "topologyAssignment", "levels")
		gomega.Expect(levels).To(gomega.ContainElement(v1.LabelHostname), "pod set assignment %v", psa)

		// Kueue's ungater gave each pod its node by hostname, all in one zone.
		list, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(list.Items).To(gomega.HaveLen(pods))
		zones := map[string]bool{}
		for _, p := range list.Items {
			gomega.Expect(p.Spec.NodeSelector).To(gomega.HaveKeyWithValue(v1.LabelHostname, p.Spec.NodeName), "pod %s", p.Name)
			n, err := f.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s", p.Name)
			zones[n.Labels[v1.LabelTopologyZone]] = true
		}
		gomega.Expect(zones).To(gomega.HaveLen(1), "zones of the Job's pods")
		outside := 0
		for _, p := range list.Items {
			if !booked[p.Spec.NodeName] {
				outside++
			}
		}
		gomega.Expect(outside).To(gomega.BeNumerically(">", 0), "Kueue put every pod on a booked node (%v): nothing shows a pod outside its booking ends it", booked)
		e.expectBookingsEnded(ctx, 1, provisioning.ReasonCapacityBookingConsumed)
		pr := e.requests(ctx)[0]
		ended := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionBookingExpired).Message
		gomega.Expect(ended).To(gomega.ContainSubstring(fmt.Sprintf("%d to nodes outside it", outside)), "request %s", pr.Name)
		ginkgo.GinkgoWriter.Printf("booked on %v, pods on %v; request %s: %s\n", booked, nodesOf(list.Items), pr.Name, ended)
	})

	ginkgo.It("passes the scale-up attempt to the Job's pods as a nodeSelector (podSetUpdates), and the pods land on that attempt's nodes", func(ctx ginkgo.SpecContext) {
		// The request's class detail names its scale-up attempt, and the
		// nodes of that attempt carry it as a label.
		e.queue(ctx, queueOptions{class: provv1.ClassBestEffortAtomicScaleUp, cpu: "100", podSetUpdates: map[string]any{
			"nodeSelector": []any{map[string]any{"key": nodegroups.LabelAttempt, "valueFromProvisioningClassDetail": provisioning.DetailScaleUpAttempt}},
		}})
		e.job(ctx, "pinned", jobOptions{pods: 3, cpu: "6"})
		e.waitJobsComplete(ctx, "pinned")
		prs := e.requests(ctx)
		gomega.Expect(prs).To(gomega.HaveLen(1))
		attempt := string(prs[0].Status.ProvisioningClassDetails[provisioning.DetailScaleUpAttempt])
		gomega.Expect(attempt).NotTo(gomega.BeEmpty(), "the request names no scale-up attempt: %v", prs[0].Status.ProvisioningClassDetails)
		pods, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(pods.Items).To(gomega.HaveLen(3))
		for _, p := range pods.Items {
			gomega.Expect(p.Spec.NodeSelector).To(gomega.HaveKeyWithValue(nodegroups.LabelAttempt, attempt), "pod %s", p.Name)
			n, err := f.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s", p.Name)
			gomega.Expect(n.Labels).To(gomega.HaveKeyWithValue(nodegroups.LabelAttempt, attempt), "pod %s on node %s", p.Name, n.Name)
		}
		e.expectBookingsEnded(ctx, 1, provisioning.ReasonCapacityBookingConsumed)
	})
})

var _ = framework.Describe("Kueue's retries of a failed scale-up", ginkgo.Label(framework.LabelKueue), ginkgo.Serial, func() {
	f := framework.NewFramework("kueue-retry")
	var e *env

	ginkgo.BeforeEach(func() {
		e = newEnv(f)
		e.leaveNothing()
	})

	ginkgo.It("rolls back an attempt whose node never comes up, fails it, and serves Kueue's next attempt from another node group", func(ctx ginkgo.SpecContext) {
		// A class that prefers the flaky group (one node of every scale-up
		// never comes up), then the general one.
		class := wrappers.MakeProvisioningClass(f.Namespace+"-flaky-first", autoscalingv1alpha1.HandlerAtomicScaleUp).
			NodeGroups("flaky", "general").ProvisioningTimeout(5 * time.Second)
		_, err := f.Gantry.AutoscalingV1alpha1().ProvisioningClasses().Create(ctx, class.Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = f.Gantry.AutoscalingV1alpha1().ProvisioningClasses().Delete(ctx, class.Name, metav1.DeleteOptions{})
		})
		// noRetry: a failed attempt fails the request, and Kueue retries
		// with a new one a second later.
		e.queue(ctx, queueOptions{class: class.Name, cpu: "100",
			parameters: map[string]any{provv1.ParameterNoRetry: "true"},
			retry:      map[string]any{"backoffLimitCount": int64(3), "backoffBaseSeconds": int64(1), "backoffMaxSeconds": int64(2)}})
		failed := e.watchFailures(ctx)
		start := time.Now()
		e.job(ctx, "retried", jobOptions{pods: 2, cpu: "6", tolerate: []string{"gantry.dev/failure-injection"}})
		e.waitJobsComplete(ctx, "retried")
		ginkgo.GinkgoWriter.Printf("Job complete %s after its creation; failed attempts: %v\n", time.Since(start).Round(time.Millisecond), failed.list())
		gomega.Expect(failed.list()).To(gomega.ContainElement(gomega.ContainSubstring("were not Ready within the provisioning timeout")),
			"no attempt failed for the flaky group's node")
		pods, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		for _, p := range pods.Items {
			n, err := f.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s", p.Name)
			gomega.Expect(n.Labels).To(gomega.HaveKeyWithValue(nodegroups.LabelNodeGroup, "general"), "pod %s", p.Name)
		}
		nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=flaky"})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(nodes.Items).To(gomega.BeEmpty(), "the failed attempt's nodes were not rolled back")
	})
})
