package reservation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/plugins/reservation"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// promptly bounds how long freed capacity may take to reach a pending pod:
// far below the scheduler's 5-minute flush of unschedulable pods, so only
// an event-driven requeue meets it.
const promptly = 30 * time.Second

var _ = framework.Describe("Reservation", ginkgo.Label(framework.LabelReservation), ginkgo.Serial, func() {
	f := framework.NewFramework("reservation")
	t := newTester(f)

	ginkgo.It("holds capacity on a full cluster for its owner, then releases what the owner left", func(ctx ginkgo.SpecContext) {
		ginkgo.By("reserving 2 CPUs for the pods labelled app=owner")
		r := t.CreateReservation(ctx, wrappers.MakeReservation("full", "cpu", "2", "memory", "1Gi").
			OwnerLabels(f.Namespace, map[string]string{"app": "owner"}))
		r = t.waitAvailable(ctx, r.Name)
		node := r.Status.NodeName
		expectSameResources(gomega.Default, r.Status.Allocatable, r.Spec.Template.Requests, "status.allocatable")

		// 1-CPU pods: as many fit as there are whole free CPUs, the
		// reservation's excepted; two more must wait.
		var fit int64
		for i := range t.nodes {
			free := milliCPU(&t.nodes[i])
			if t.nodes[i].Name == node {
				free -= cpuMilli(r.Spec.Template.Requests)
			}
			fit += free / 1000
		}
		replicas := int32(fit + 2)
		ginkgo.By(fmt.Sprintf("filling the cluster with %d one-CPU pods of which %d fit", replicas, fit))
		filler := wrappers.MakePod("", f.Namespace).Label("app", "filler").Requests("cpu", "1", "memory", "64Mi").NoGrace()
		_, err := f.Client.AppsV1().Deployments(f.Namespace).Create(ctx,
			wrappers.MakeDeployment("filler", f.Namespace, replicas, filler).Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())

		fillers := func(g gomega.Gomega) (bound, pending []v1.Pod) {
			list, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=filler"})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			for _, p := range list.Items {
				if p.Spec.NodeName != "" {
					bound = append(bound, p)
				} else {
					pending = append(pending, p)
				}
			}
			return bound, pending
		}
		onNode := func(pods []v1.Pod) (n int64) {
			for _, p := range pods {
				if p.Spec.NodeName == node {
					n++
				}
			}
			return n
		}
		ginkgo.By("checking the pods beyond the free capacity stay Pending, unschedulable")
		framework.Eventually(ctx, func(g gomega.Gomega) {
			bound, pending := fillers(g)
			g.Expect(bound).To(gomega.HaveLen(int(fit)))
			g.Expect(pending).To(gomega.HaveLen(2))
			for i := range pending {
				framework.ExpectUnschedulable(g, &pending[i], "Insufficient cpu")
			}
			g.Expect(onNode(bound)).To(gomega.Equal((milliCPU(nodeNamed(t, node))-cpuMilli(r.Spec.Template.Requests))/1000),
				"non-owner pods on the reservation's node %s", node)
		}).Should(gomega.Succeed())
		r, err = t.rsv.Get(ctx, r.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable), "the full cluster took the reservation: %s", describeStatus(r))

		ginkgo.By("creating an owner pod that needs half of the reservation")
		owner := t.CreatePod(ctx, wrappers.MakePod("owner", f.Namespace).Label("app", "owner").Requests("cpu", "1", "memory", "512Mi"))
		owner = t.WaitScheduled(ctx, util.LongTimeout, owner.Name)
		gomega.Expect(owner.Spec.NodeName).To(gomega.Equal(node), "the owner is not on its reservation's node")
		expectAllocatedTo(gomega.Default, owner, r)

		ginkgo.By("checking the reservation records its owner and is Succeeded")
		var succeeded time.Time
		r = t.waitReservation(ctx, r.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationSucceeded), describeStatus(r))
			g.Expect(ownerRefs(r)).To(gomega.Equal([]string{podRef(owner)}))
			expectSameResources(g, r.Status.Allocated, podRequests(owner), "status.allocated")
			expectCondition(g, r, schedv1alpha1.ConditionReady, metav1.ConditionFalse, schedv1alpha1.ReasonAllocated)
			succeeded = time.Now()
		})
		gomega.Expect(r.Status.NodeName).To(gomega.Equal(node))

		ginkgo.By("checking the CPU the owner left is released to one pending pod, promptly")
		gomega.Eventually(ctx, func(g gomega.Gomega) {
			bound, pending := fillers(g)
			g.Expect(bound).To(gomega.HaveLen(int(fit) + 1))
			g.Expect(onNode(bound)).To(gomega.Equal((milliCPU(nodeNamed(t, node))-cpuMilli(r.Spec.Template.Requests))/1000 + 1))
			g.Expect(pending).To(gomega.HaveLen(1))
		}).WithTimeout(promptly).WithPolling(util.Interval).Should(gomega.Succeed())
		ginkgo.By(fmt.Sprintf("the released CPU was used %s after the reservation was seen Succeeded", time.Since(succeeded).Round(100*time.Millisecond)))
		if framework.TestContext.Local != nil {
			ginkgo.By("checking the scheduler counts every pod and reservation of the full cluster once")
			framework.Eventually(ctx, func(g gomega.Gomega) { t.checkAccounting(ctx, g) }).Should(gomega.Succeed())
		}
	})

	ginkgo.It("stays Pending with the scheduler's reason when it fits nowhere", func(ctx ginkgo.SpecContext) {
		var most int64
		for i := range t.nodes {
			most = max(most, milliCPU(&t.nodes[i]))
		}
		ginkgo.By(fmt.Sprintf("reserving %dm CPUs, one CPU more than the largest node has", most+1000))
		r := t.CreateReservation(ctx, wrappers.MakeReservation("too-big", "cpu", fmt.Sprintf("%dm", most+1000)).
			OwnerLabels(f.Namespace, map[string]string{"app": "big"}))
		r = t.waitReservation(ctx, r.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationPending), describeStatus(r))
			expectCondition(g, r, schedv1alpha1.ConditionScheduled, metav1.ConditionFalse, schedv1alpha1.ReasonUnschedulable)
		})
		gomega.Expect(r.Status.NodeName).To(gomega.BeEmpty())
		expectCondition(gomega.Default, r, schedv1alpha1.ConditionReady, metav1.ConditionFalse, "Pending")
		msg := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionScheduled).Message
		// Every node of the cluster was considered: the kwok nodes, and on
		// kind the real ones, which the suite's taint keeps it off.
		all, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(msg).To(gomega.ContainSubstring(fmt.Sprintf("0/%d nodes are available", len(all.Items))))
		gomega.Expect(msg).To(gomega.ContainSubstring("Insufficient cpu"))
		// The reason is the scheduler's diagnosis; a failure of the
		// scheduler's own machinery (e.g. preemption looking the
		// reservation up as a pod) is not a reason to give its user.
		gomega.Expect(msg).NotTo(gomega.ContainSubstring("not found"), "the Scheduled condition reports an internal error")
	})

	ginkgo.It("keeps reserved capacity from non-owner pods, and gives it to an owner", func(ctx ginkgo.SpecContext) {
		node := &t.nodes[0]
		held := milliCPU(node) - 500
		ginkgo.By(fmt.Sprintf("reserving %dm of the %dm CPUs of %s for pod owner", held, milliCPU(node), node.Name))
		r := t.CreateReservation(ctx, wrappers.MakeReservation("pinned", "cpu", fmt.Sprintf("%dm", held)).
			NodeName(node.Name).OwnerPod(f.Namespace, "owner"))
		r = t.waitAvailable(ctx, r.Name)
		gomega.Expect(r.Status.NodeName).To(gomega.Equal(node.Name))

		ginkgo.By("checking a non-owner pod needing 1 CPU on that node stays Pending for lack of CPU")
		t.CreatePod(ctx, wrappers.MakePod("intruder", f.Namespace).OnNode(node.Name).Requests("cpu", "1"))
		t.WaitUnschedulable(ctx, "intruder", "Insufficient cpu")
		framework.Eventually(ctx, func(g gomega.Gomega) {
			events, err := f.Client.CoreV1().Events(f.Namespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.name": "intruder", "reason": "FailedScheduling"}.String(),
			})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(events.Items).NotTo(gomega.BeEmpty())
			g.Expect(events.Items[0].Message).To(gomega.ContainSubstring("Insufficient cpu"))
		}).Should(gomega.Succeed(), "no FailedScheduling event for the intruder")

		ginkgo.By("checking the owner, of the same size, fits there")
		owner := t.CreatePod(ctx, wrappers.MakePod("owner", f.Namespace).OnNode(node.Name).Requests("cpu", "1"))
		owner = t.WaitScheduled(ctx, util.LongTimeout, owner.Name)
		gomega.Expect(owner.Spec.NodeName).To(gomega.Equal(node.Name))
		expectAllocatedTo(gomega.Default, owner, r)

		// The owner consumed the reservation (allocateOnce): the 2500m it
		// left are released, and the intruder fits beside it.
		ginkgo.By("checking the reservation is Succeeded and what the owner left goes to the intruder")
		t.waitReservation(ctx, r.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationSucceeded), describeStatus(r))
			g.Expect(ownerRefs(r)).To(gomega.Equal([]string{podRef(owner)}))
		})
		intruder := t.WaitScheduled(ctx, util.LongTimeout, "intruder")
		gomega.Expect(intruder.Spec.NodeName).To(gomega.Equal(node.Name))
		_, allocated := allocationOf(intruder)
		gomega.Expect(allocated).To(gomega.BeFalse(), "a non-owner was placed in the reservation")
		scheduled, ownerScheduled := util.PodCondition(intruder, v1.PodScheduled), util.PodCondition(owner, v1.PodScheduled)
		gomega.Expect(scheduled).NotTo(gomega.BeNil())
		gomega.Expect(ownerScheduled).NotTo(gomega.BeNil())
		gomega.Expect(scheduled.LastTransitionTime.Time).To(gomega.BeTemporally(">=", ownerScheduled.LastTransitionTime.Time),
			"the intruder was bound before the owner took the reservation")
	})

	ginkgo.It("releases its capacity when its TTL passes", func(ctx ginkgo.SpecContext) {
		node := &t.nodes[1]
		const ttl = 15 * time.Second
		held := milliCPU(node) - 500
		ginkgo.By(fmt.Sprintf("reserving %dm CPUs of %s for %s", held, node.Name, ttl))
		r := t.CreateReservation(ctx, wrappers.MakeReservation("ttl", "cpu", fmt.Sprintf("%dm", held)).
			NodeName(node.Name).TTL(ttl).OwnerLabels(f.Namespace, map[string]string{"app": "nobody"}))
		r = t.waitAvailable(ctx, r.Name)

		ginkgo.By("checking a non-owner pod needing 1 CPU there is unschedulable while it holds")
		t.CreatePod(ctx, wrappers.MakePod("waiter", f.Namespace).OnNode(node.Name).Requests("cpu", "1"))
		t.WaitUnschedulable(ctx, "waiter", "Insufficient cpu")
		r, err := t.rsv.Get(ctx, r.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable),
			"the reservation ended before the pod was found unschedulable; the spec proves nothing: %s", describeStatus(r))

		ginkgo.By("waiting for the reservation to expire")
		var expired *metav1.Condition
		r = t.waitReservation(ctx, r.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationFailed), describeStatus(r))
			expired = expectCondition(g, r, schedv1alpha1.ConditionReady, metav1.ConditionFalse, schedv1alpha1.ReasonExpired)
		})
		gomega.Expect(expired.LastTransitionTime.Time).To(gomega.BeTemporally(">=", r.CreationTimestamp.Add(ttl-time.Second)),
			"expired before its TTL: created %s, %s", r.CreationTimestamp, expired.Message)
		gomega.Expect(expired.Message).To(gomega.ContainSubstring("expired at"))

		ginkgo.By("checking the pending pod gets the capacity promptly")
		waiter := t.WaitForPod(ctx, util.LongTimeout, "waiter", "bound to "+node.Name, func(p *v1.Pod) bool { return p.Spec.NodeName == node.Name })
		scheduled := util.PodCondition(waiter, v1.PodScheduled)
		gomega.Expect(scheduled).NotTo(gomega.BeNil())
		gomega.Expect(scheduled.Status).To(gomega.Equal(v1.ConditionTrue))
		gomega.Expect(scheduled.LastTransitionTime.Time).To(gomega.BeTemporally(">=", expired.LastTransitionTime.Time),
			"the pod was scheduled before the reservation expired")
		gomega.Expect(scheduled.LastTransitionTime.Sub(expired.LastTransitionTime.Time)).To(gomega.BeNumerically("<", promptly),
			"the pod waited too long for the expired reservation's capacity")
	})

	ginkgo.It("is shared by its owners with allocateOnce=false, and stays Available", func(ctx ginkgo.SpecContext) {
		const rsName = "shared"
		ginkgo.By("reserving 2 CPUs and 2Gi for the pods of ReplicaSet " + rsName)
		r := t.CreateReservation(ctx, wrappers.MakeReservation("shared", "cpu", "2", "memory", "2Gi").
			AllocateOnce(false).OwnerController(f.Namespace, "apps/v1", "ReplicaSet", rsName))
		r = t.waitAvailable(ctx, r.Name)
		node := r.Status.NodeName

		ginkgo.By("creating the ReplicaSet: two pods of 1 CPU and 1Gi")
		tmpl := wrappers.MakePod("", f.Namespace).Label("app", rsName).Requests("cpu", "1", "memory", "1Gi").NoGrace()
		_, err := f.Client.AppsV1().ReplicaSets(f.Namespace).Create(ctx,
			wrappers.MakeReplicaSet(rsName, f.Namespace, 2, tmpl).Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())

		ginkgo.By("checking both pods are placed in the reservation")
		var owners []string
		framework.Eventually(ctx, func(g gomega.Gomega) {
			list, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + rsName})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(list.Items).To(gomega.HaveLen(2))
			owners = nil
			for i := range list.Items {
				p := &list.Items[i]
				g.Expect(p.Spec.NodeName).To(gomega.Equal(node), "pod %s", p.Name)
				expectAllocatedTo(g, p, r)
				owners = append(owners, podRef(p))
			}
		}).Should(gomega.Succeed())

		ginkgo.By("checking the reservation stays Available with both owners recorded")
		t.waitReservation(ctx, r.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(ownerRefs(r)).To(gomega.ConsistOf(owners))
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable), describeStatus(r))
			expectCondition(g, r, schedv1alpha1.ConditionReady, metav1.ConditionTrue, schedv1alpha1.ReasonAvailable)
			expectSameResources(g, r.Status.Allocated, r.Spec.Template.Requests, "status.allocated")
		})
		if framework.TestContext.Local != nil {
			framework.Eventually(ctx, func(g gomega.Gomega) {
				nrs, err := getNodeReservations(ctx, node)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				nr := findNodeReservation(nrs, r.Name)
				g.Expect(nr).NotTo(gomega.BeNil())
				g.Expect(nr.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable))
				g.Expect(nr.Allocated).To(gomega.HaveLen(2))
				expectSameResources(g, nr.Remaining, nil, "remaining")
			}).Should(gomega.Succeed())
		}
	})

	ginkgo.It("frees its capacity at once when deleted", func(ctx ginkgo.SpecContext) {
		node := &t.nodes[2]
		held := milliCPU(node) - 500
		r := t.CreateReservation(ctx, wrappers.MakeReservation("deleted", "cpu", fmt.Sprintf("%dm", held)).
			NodeName(node.Name).OwnerLabels(f.Namespace, map[string]string{"app": "nobody"}))
		r = t.waitAvailable(ctx, r.Name)
		t.CreatePod(ctx, wrappers.MakePod("waiter", f.Namespace).OnNode(node.Name).Requests("cpu", "1"))
		t.WaitUnschedulable(ctx, "waiter", "Insufficient cpu")

		ginkgo.By("deleting the reservation")
		deleted := time.Now()
		gomega.Expect(t.rsv.Delete(ctx, r.Name, metav1.DeleteOptions{})).To(gomega.Succeed())
		gomega.Eventually(ctx, func(g gomega.Gomega) {
			p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, "waiter", metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(p.Spec.NodeName).To(gomega.Equal(node.Name))
		}).WithTimeout(promptly).WithPolling(util.Interval).Should(gomega.Succeed(),
			"the pending pod did not get the deleted reservation's capacity within %s", promptly)
		ginkgo.By(fmt.Sprintf("the pending pod was bound %s after the delete", time.Since(deleted).Round(100*time.Millisecond)))
		if framework.TestContext.Local != nil {
			nrs, err := getNodeReservations(ctx, node.Name)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(findNodeReservation(nrs, r.Name)).To(gomega.BeNil(), "the scheduler still knows the deleted reservation")
		}
	})

	ginkgo.It("keeps reservations and allocations, and leaks nothing, across a scheduler restart", func(ctx ginkgo.SpecContext) {
		framework.RequireLocal("it restarts kube-scheduler")
		a, b, c := &t.nodes[0], &t.nodes[1], &t.nodes[2]
		ginkgo.By("reserving 2 CPUs on " + a.Name + " for shared owners and 3 CPUs on " + b.Name + " and " + c.Name + " for one owner each")
		r1 := t.CreateReservation(ctx, wrappers.MakeReservation("shared", "cpu", "2", "memory", "1Gi").NodeName(a.Name).
			AllocateOnce(false).OwnerLabels(f.Namespace, map[string]string{"app": "r1"}))
		r2 := t.CreateReservation(ctx, wrappers.MakeReservation("single", "cpu", "3").NodeName(b.Name).
			OwnerLabels(f.Namespace, map[string]string{"app": "r2"}))
		r3 := t.CreateReservation(ctx, wrappers.MakeReservation("consumed", "cpu", "3").NodeName(c.Name).
			OwnerLabels(f.Namespace, map[string]string{"app": "r3"}))
		r1 = t.waitAvailable(ctx, r1.Name)
		r2 = t.waitAvailable(ctx, r2.Name)
		r3 = t.waitAvailable(ctx, r3.Name)

		ginkgo.By("consuming the reservation on " + c.Name + " with a 1-CPU owner, and giving what it left to a non-owner")
		o0 := t.CreatePod(ctx, wrappers.MakePod("r3-owner", f.Namespace).Label("app", "r3").Requests("cpu", "1"))
		o0 = t.WaitScheduled(ctx, util.LongTimeout, o0.Name)
		gomega.Expect(o0.Spec.NodeName).To(gomega.Equal(c.Name))
		expectAllocatedTo(gomega.Default, o0, r3)
		r3 = t.waitReservation(ctx, r3.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationSucceeded), describeStatus(r))
		})
		beside := t.CreatePod(ctx, wrappers.MakePod("beside", f.Namespace).OnNode(c.Name).
			Requests("cpu", fmt.Sprintf("%dm", milliCPU(c)-cpuMilli(podRequests(o0)))))
		t.WaitScheduled(ctx, util.LongTimeout, beside.Name)

		ginkgo.By("placing an owner in the shared reservation, and a non-owner that does not fit next to the other")
		o1 := t.CreatePod(ctx, wrappers.MakePod("r1-owner-1", f.Namespace).Label("app", "r1").Requests("cpu", "1", "memory", "512Mi"))
		o1 = t.WaitScheduled(ctx, util.LongTimeout, o1.Name)
		gomega.Expect(o1.Spec.NodeName).To(gomega.Equal(a.Name))
		expectAllocatedTo(gomega.Default, o1, r1)
		blocked := fmt.Sprintf("%dm", milliCPU(b)-cpuMilli(r2.Spec.Template.Requests)+500)
		t.CreatePod(ctx, wrappers.MakePod("blocked-1", f.Namespace).OnNode(b.Name).Requests("cpu", blocked))
		t.WaitUnschedulable(ctx, "blocked-1", "Insufficient cpu")
		r1 = t.waitReservation(ctx, r1.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(ownerRefs(r)).To(gomega.Equal([]string{podRef(o1)}))
		})

		type snapshot struct {
			views map[string]*frameworkext.NodeView
			nrs   map[string][]reservation.NodeReservation
		}
		take := func(g gomega.Gomega) snapshot {
			s := snapshot{views: map[string]*frameworkext.NodeView{}, nrs: map[string][]reservation.NodeReservation{}}
			for _, n := range []string{a.Name, b.Name, c.Name} {
				v, err := framework.SchedulerNodeView(ctx, n)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				nrs, err := getNodeReservations(ctx, n)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				s.views[n], s.nrs[n] = v, nrs
			}
			return s
		}
		var before snapshot
		framework.Eventually(ctx, func(g gomega.Gomega) {
			t.checkAccounting(ctx, g)
			before = take(g)
			g.Expect(before.nrs[a.Name]).To(gomega.HaveLen(1))
			g.Expect(before.nrs[a.Name][0].Allocated).To(gomega.Equal([]string{f.Namespace + "/" + o1.Name}))
			expectSameResources(g, before.nrs[a.Name][0].Remaining, wrappers.ResourceList("cpu", "1", "memory", "512Mi"), "remaining of %s", r1.Name)
			g.Expect(before.nrs[c.Name]).To(gomega.HaveLen(1))
			g.Expect(before.nrs[c.Name][0].Phase).To(gomega.Equal(schedv1alpha1.ReservationSucceeded))
			g.Expect(before.nrs[c.Name][0].Remaining).To(gomega.BeEmpty(), "a consumed reservation still holds capacity")
			g.Expect(viewEntry(before.views[c.Name], r3.UID)).To(gomega.BeNil(), "a consumed reservation is still in the cache")
		}).Should(gomega.Succeed())

		ginkgo.By("restarting kube-scheduler (SIGTERM)")
		framework.RestartScheduler(ctx, syscall.SIGTERM)

		ginkgo.By("checking the reservations are unchanged and the new scheduler sees exactly what the old one did")
		for _, want := range []*schedv1alpha1.Reservation{r1, r2, r3} {
			got, err := t.rsv.Get(ctx, want.Name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(got.Status.Phase).To(gomega.Equal(want.Status.Phase), describeStatus(got))
			gomega.Expect(got.Status.NodeName).To(gomega.Equal(want.Status.NodeName))
			gomega.Expect(ownerRefs(got)).To(gomega.Equal(ownerRefs(want)))
		}
		framework.Eventually(ctx, func(g gomega.Gomega) {
			after := take(g)
			for _, n := range []string{a.Name, b.Name, c.Name} {
				g.Expect(after.nrs[n]).To(gomega.HaveLen(len(before.nrs[n])))
				for i, want := range before.nrs[n] {
					got := after.nrs[n][i]
					g.Expect(got.UID).To(gomega.Equal(want.UID))
					g.Expect(got.Phase).To(gomega.Equal(want.Phase))
					g.Expect(got.Allocated).To(gomega.Equal(want.Allocated), "allocated pods of %s", got.Name)
					g.Expect(got.Pending).To(gomega.BeEmpty(), "pending pods of %s", got.Name)
					expectSameResources(g, got.Remaining, want.Remaining, "remaining of %s", got.Name)
				}
				expectSameResources(g, after.views[n].Requested, before.views[n].Requested, "requested on %s", n)
				g.Expect(after.views[n].Pods).To(gomega.ConsistOf(before.views[n].Pods), "the scheduler's cache of %s", n)
			}
			t.checkAccounting(ctx, g)
		}).Should(gomega.Succeed())

		ginkgo.By("checking a non-owner pod that did not fit still does not")
		t.CreatePod(ctx, wrappers.MakePod("blocked-2", f.Namespace).OnNode(b.Name).Requests("cpu", blocked))
		t.WaitUnschedulable(ctx, "blocked-2", "Insufficient cpu")
		p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, "blocked-1", metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "a non-owner got reserved capacity after the restart")

		ginkgo.By("checking owners still fit: a second in the shared reservation, one taking the other")
		o2 := t.CreatePod(ctx, wrappers.MakePod("r1-owner-2", f.Namespace).Label("app", "r1").Requests("cpu", "1", "memory", "512Mi"))
		o3 := t.CreatePod(ctx, wrappers.MakePod("r2-owner", f.Namespace).Label("app", "r2").Requests("cpu", "3"))
		o2, o3 = t.WaitScheduled(ctx, util.LongTimeout, o2.Name), t.WaitScheduled(ctx, util.LongTimeout, o3.Name)
		gomega.Expect(o2.Spec.NodeName).To(gomega.Equal(a.Name))
		expectAllocatedTo(gomega.Default, o2, r1)
		gomega.Expect(o3.Spec.NodeName).To(gomega.Equal(b.Name))
		expectAllocatedTo(gomega.Default, o3, r2)
		t.waitReservation(ctx, r1.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable))
			g.Expect(ownerRefs(r)).To(gomega.ConsistOf(podRef(o1), podRef(o2)))
		})
		t.waitReservation(ctx, r2.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationSucceeded), describeStatus(r))
			g.Expect(ownerRefs(r)).To(gomega.Equal([]string{podRef(o3)}))
		})
		framework.Eventually(ctx, func(g gomega.Gomega) { t.checkAccounting(ctx, g) }).Should(gomega.Succeed())
		for _, name := range []string{"blocked-1", "blocked-2"} {
			p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "pod %s got reserved capacity", name)
		}
	})

	ginkgo.It("places reservations created as the scheduler crashes exactly once", func(ctx ginkgo.SpecContext) {
		local := framework.RequireLocal("it restarts kube-scheduler")
		const count = 3
		selector := framework.NamespaceLabel + "=" + f.Namespace
		ginkgo.By("watching the spec's reservations")
		w, err := t.rsv.Watch(ctx, metav1.ListOptions{LabelSelector: selector})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		history := recordHistory(w)
		defer w.Stop()

		ginkgo.By(fmt.Sprintf("creating %d reservations while kube-scheduler is killed (SIGKILL) and restarted", count))
		var names []string
		var restarted sync.WaitGroup
		// Until the killed leader's lease expires, the new process serves
		// but does not lead: its leader-only endpoints must say so.
		leaderOnly := nodeReservationsPath + t.nodes[0].Name
		var notLeader []string
		polled := make(chan struct{})
		stopPolling := make(chan struct{})
		go func() {
			defer close(polled)
			for {
				_, err := local.ComponentGet(ctx, framework.SchedulerComponent, leaderOnly)
				var herr *cluster.ComponentHTTPError
				if errors.As(err, &herr) && herr.StatusCode == http.StatusServiceUnavailable {
					notLeader = append(notLeader, herr.Body)
				}
				select {
				case <-stopPolling:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
		for i := range count {
			r := t.CreateReservation(ctx, wrappers.MakeReservation(fmt.Sprintf("crash-%d", i), "cpu", "1", "memory", "256Mi").
				OwnerLabels(f.Namespace, map[string]string{"app": "late"}))
			names = append(names, r.Name)
			if i == 0 {
				restarted.Go(func() {
					defer ginkgo.GinkgoRecover()
					framework.RestartScheduler(ctx, syscall.SIGKILL)
				})
			}
		}
		restarted.Wait()
		close(stopPolling)
		<-polled

		ginkgo.By("checking the new process answered 503 on a leader-only endpoint until it led")
		gomega.Expect(notLeader).NotTo(gomega.BeEmpty(), "GET %s never answered 503 while the new kube-scheduler waited for the lease", leaderOnly)
		gomega.Expect(notLeader[0]).To(gomega.ContainSubstring("not the leader"))
		_, err = local.ComponentGet(ctx, framework.SchedulerComponent, leaderOnly)
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "the leader does not serve %s", leaderOnly)

		ginkgo.By("checking each ends Available on one node, held there once")
		for _, name := range names {
			t.waitAvailable(ctx, name)
		}
		framework.Eventually(ctx, func(g gomega.Gomega) { t.checkAccounting(ctx, g) }).Should(gomega.Succeed())
		for _, name := range names {
			r, err := t.rsv.Get(ctx, name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			nrs, err := getNodeReservations(ctx, r.Status.NodeName)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			nr := findNodeReservation(nrs, name)
			gomega.Expect(nr).NotTo(gomega.BeNil(), "the scheduler does not list %s on its node %s", name, r.Status.NodeName)
			expectSameResources(gomega.Default, nr.Remaining, r.Spec.Template.Requests, "remaining of %s", name)
		}
		ginkgo.By("checking no reservation was ever placed twice")
		for _, name := range names {
			steps := history.of(name)
			ginkgo.GinkgoWriter.Printf("%s: %v\n", name, steps)
			var nodes []string
			availableRuns := 0
			prev := schedv1alpha1.ReservationPhase("")
			for _, s := range steps {
				if s.node != "" && (len(nodes) == 0 || nodes[len(nodes)-1] != s.node) {
					nodes = append(nodes, s.node)
				}
				if s.phase == schedv1alpha1.ReservationAvailable && prev != schedv1alpha1.ReservationAvailable {
					availableRuns++
				}
				prev = s.phase
			}
			gomega.Expect(nodes).To(gomega.HaveLen(1), "reservation %s moved: %v", name, steps)
			gomega.Expect(availableRuns).To(gomega.Equal(1), "reservation %s became Available more than once: %v", name, steps)
		}

		ginkgo.By("checking an owner still uses one of them")
		o := t.CreatePod(ctx, wrappers.MakePod("late-owner", f.Namespace).Label("app", "late").Requests("cpu", "1"))
		o = t.WaitScheduled(ctx, util.LongTimeout, o.Name)
		a, ok := allocationOf(o)
		gomega.Expect(ok).To(gomega.BeTrue(), "the owner was not placed in a reservation: %v", o.Annotations)
		gomega.Expect(names).To(gomega.ContainElement(a.Name))
		framework.Eventually(ctx, func(g gomega.Gomega) { t.checkAccounting(ctx, g) }).Should(gomega.Succeed())
	})

	ginkgo.It("is shown by the scheduler's REST services and score-debug table", func(ctx ginkgo.SpecContext) {
		framework.RequireLocal("it calls kube-scheduler's endpoints and reads its log")
		ginkgo.By("listing the services")
		var services map[string][]string
		gomega.Expect(framework.SchedulerGetJSON(ctx, servicesPath, &services)).To(gomega.Succeed())
		gomega.Expect(services).To(gomega.HaveKey("GET"))
		gomega.Expect(services["GET"]).To(gomega.ContainElements(servicesPath, nodesPath+"{node}", nodeReservationsPath+"{node}"))

		node := &t.nodes[2]
		r := t.CreateReservation(ctx, wrappers.MakeReservation("rest", "cpu", "1500m", "memory", "1Gi").NodeName(node.Name).
			AllocateOnce(false).OwnerLabels(f.Namespace, map[string]string{"app": "web"}))
		r = t.waitAvailable(ctx, r.Name)

		ginkgo.By("checking nodes/{node} shows the reservation as a pod holding its requests")
		framework.Eventually(ctx, func(g gomega.Gomega) {
			v, err := framework.SchedulerNodeView(ctx, node.Name)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(v.Name).To(gomega.Equal(node.Name))
			e := viewEntry(v, r.UID)
			g.Expect(e).NotTo(gomega.BeNil(), "no entry for %s in %v", r.Name, v.Pods)
			g.Expect(e.Name).To(gomega.Equal(r.Name))
			g.Expect(e.Namespace).To(gomega.BeEmpty())
			expectSameResources(g, e.Requests, r.Spec.Template.Requests, "the reservation's entry")
			expectSameResources(g, v.Requested, r.Spec.Template.Requests, "requested on %s", node.Name)
		}).Should(gomega.Succeed())
		gomega.Expect(framework.SchedulerGetJSON(ctx, nodesPath+"no-such-node", &frameworkext.NodeView{})).To(
			gomega.MatchError(gomega.ContainSubstring("404")), "an unknown node")

		ginkgo.By("checking nodeReservations/{node} matches the reservation's status")
		nrs, err := getNodeReservations(ctx, node.Name)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(nrs).To(gomega.HaveLen(1))
		gomega.Expect(nrs[0].Name).To(gomega.Equal(r.Name))
		gomega.Expect(nrs[0].UID).To(gomega.Equal(r.UID))
		gomega.Expect(nrs[0].Phase).To(gomega.Equal(r.Status.Phase))
		gomega.Expect(nrs[0].AllocateOnce).To(gomega.BeFalse())
		expectSameResources(gomega.Default, nrs[0].Allocatable, r.Status.Allocatable, "allocatable")
		expectSameResources(gomega.Default, nrs[0].Remaining, r.Spec.Template.Requests, "remaining")
		gomega.Expect(nrs[0].Allocated).To(gomega.BeEmpty())

		ginkgo.By("turning score debugging on (PUT /debug/flags/s 3; the tables are logged at verbosity 2)")
		out, err := framework.SchedulerPut(ctx, "/debug/flags/s", "3")
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.GinkgoWriter.Printf("PUT /debug/flags/s: %s\n", out)
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_, err := framework.SchedulerPut(ctx, "/debug/flags/s", "0")
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
		})
		restoreVerbosity := framework.SchedulerVerbosity(ctx, 2)
		ginkgo.DeferCleanup(restoreVerbosity)

		ginkgo.By("placing an owner and checking the reservation's accounting follows")
		owner := t.CreatePod(ctx, wrappers.MakePod("web-1", f.Namespace).Label("app", "web").Requests("cpu", "500m", "memory", "256Mi"))
		owner = t.WaitScheduled(ctx, util.LongTimeout, owner.Name)
		gomega.Expect(owner.Spec.NodeName).To(gomega.Equal(node.Name))
		left := wrappers.ResourceList("cpu", "1", "memory", "768Mi")
		framework.Eventually(ctx, func(g gomega.Gomega) {
			nrs, err := getNodeReservations(ctx, node.Name)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			nr := findNodeReservation(nrs, r.Name)
			g.Expect(nr).NotTo(gomega.BeNil())
			g.Expect(nr.Allocated).To(gomega.Equal([]string{f.Namespace + "/" + owner.Name}))
			expectSameResources(g, nr.Remaining, left, "remaining")
			v, err := framework.SchedulerNodeView(ctx, node.Name)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			e := viewEntry(v, r.UID)
			g.Expect(e).NotTo(gomega.BeNil())
			expectSameResources(g, e.Requests, left, "the reservation's entry after the owner")
			g.Expect(viewEntry(v, owner.UID)).NotTo(gomega.BeNil(), "the owner is not in the node view")
			rs, err := t.rsv.Get(ctx, r.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(ownerRefs(rs)).To(gomega.Equal([]string{podRef(owner)}))
			expectSameResources(g, rs.Status.Allocated, podRequests(owner), "status.allocated")
		}).Should(gomega.Succeed())

		ginkgo.By("checking the owner was placed by its reservation's hint, without scoring")
		log, err := framework.ComponentLog(framework.SchedulerComponent)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(findScoreTable(log, f.Namespace+"/"+owner.Name)).To(gomega.BeNil(),
			"the reservation holds the owner whole: the scheduler tries its node first and scores nothing")

		ginkgo.By("placing an owner the reservation cannot hold whole (memory), which is scored, and finding its score table")
		big := t.CreatePod(ctx, wrappers.MakePod("web-big", f.Namespace).Label("app", "web").Requests("cpu", "500m", "memory", "1Gi"))
		big = t.WaitScheduled(ctx, util.LongTimeout, big.Name)
		var table *scoreTable
		framework.Eventually(ctx, func(g gomega.Gomega) {
			log, err := framework.ComponentLog(framework.SchedulerComponent)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			table = findScoreTable(log, f.Namespace+"/"+big.Name)
			g.Expect(table).NotTo(gomega.BeNil(), "no Score debug table for %s/%s", f.Namespace, big.Name)
		}).Should(gomega.Succeed())
		ginkgo.GinkgoWriter.Printf("score table of %s: %v %v\n", big.Name, table.Header, table.Rows)
		gomega.Expect(len(table.Header)).To(gomega.BeNumerically(">", 3))
		gomega.Expect(table.Header[:3]).To(gomega.Equal([]string{"#", "Node", "Total"}))
		gomega.Expect(table.Header).To(gomega.ContainElement("Reservation"))
		gomega.Expect(table.Rows).To(gomega.HaveLen(3), "want the top 3 nodes")
		for i, row := range table.Rows {
			gomega.Expect(row).To(gomega.HaveLen(len(table.Header)), "row %d", i)
			gomega.Expect(row[0]).To(gomega.Equal(fmt.Sprint(i + 1)))
		}
		gomega.Expect(big.Spec.NodeName).To(gomega.Equal(node.Name))
		gomega.Expect(table.column(0, "Node")).To(gomega.Equal(node.Name), "the reservation's node does not score first")
		gomega.Expect(table.column(0, "Reservation")).To(gomega.Equal("500"), "half of MaxNodeScore (the reservation holds part of the pod) × weight 10 on the reservation's node")
		gomega.Expect(table.column(1, "Reservation")).To(gomega.Equal("0"))
		gomega.Expect(table.column(2, "Reservation")).To(gomega.Equal("0"))

		ginkgo.By("turning score debugging off (PUT /debug/flags/s 0)")
		_, err = framework.SchedulerPut(ctx, "/debug/flags/s", "0")
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		// A pod that owns nothing is scored: with debugging on it would have
		// a table.
		quiet := t.CreatePod(ctx, wrappers.MakePod("other", f.Namespace).Label("app", "other").Requests("cpu", "500m"))
		t.WaitScheduled(ctx, util.LongTimeout, quiet.Name)
		log, err = framework.ComponentLog(framework.SchedulerComponent)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(findScoreTable(log, f.Namespace+"/"+quiet.Name)).To(gomega.BeNil(), "a score table was logged with debugging off")
	})

	ginkgo.It("rejects bad input with a message naming the field", func(ctx ginkgo.SpecContext) {
		_, err := t.rsv.Create(ctx, wrappers.MakeReservation(t.ReservationName("no-owners"), "cpu", "1").Label(framework.NamespaceLabel, f.Namespace).Obj(), metav1.CreateOptions{})
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("spec.owners"))

		_, err = t.rsv.Create(ctx, wrappers.MakeReservation(t.ReservationName("negative"), "cpu", "-1").Label(framework.NamespaceLabel, f.Namespace).
			OwnerLabels(f.Namespace, map[string]string{"app": "x"}).Obj(), metav1.CreateOptions{})
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("spec.template.requests"))
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("must not be negative"))

		rs, err := t.rsv.List(ctx, metav1.ListOptions{LabelSelector: framework.NamespaceLabel + "=" + f.Namespace})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(rs.Items).To(gomega.BeEmpty(), "a rejected reservation was stored")
	})
})

func nodeNamed(t *tester, name string) *v1.Node {
	for i := range t.nodes {
		if t.nodes[i].Name == name {
			return &t.nodes[i]
		}
	}
	ginkgo.Fail("no node " + name)
	return nil
}

// step is a reservation's phase and node as one watch event showed them.
type step struct {
	phase schedv1alpha1.ReservationPhase
	node  string
}

func (s step) String() string { return fmt.Sprintf("%s@%s", s.phase, s.node) }

// history is what a watch saw of each reservation, by name.
type history struct {
	mu    sync.Mutex
	steps map[string][]step
}

func recordHistory(w watch.Interface) *history {
	h := &history{steps: map[string][]step{}}
	go func() {
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*schedv1alpha1.Reservation)
			if !ok {
				continue
			}
			h.mu.Lock()
			h.steps[r.Name] = append(h.steps[r.Name], step{phase: r.Status.Phase, node: r.Status.NodeName})
			h.mu.Unlock()
		}
	}()
	return h
}

func (h *history) of(name string) []step {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]step(nil), h.steps[name]...)
}
