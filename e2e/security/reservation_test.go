package security

import (
	"context"
	"encoding/json"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/util"
	utilgomega "github.com/gantry-dev/gantry/test/util/gomega"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// Finding 3: the pod annotation scheduling.gantry.dev/reservation-allocated
// was trusted alone: a pod creator could take another tenant's reservation
// and claim any priority as a preemption victim.
var _ = framework.Describe("A forged reservation allocation", ginkgo.Label(framework.LabelSecurity, framework.LabelReservation), ginkgo.Serial, func() {
	victim := framework.NewFramework("security-victim")
	attacker := framework.NewFramework("security-attacker")
	var (
		node     v1.Node
		intruder *framework.Tenant
	)

	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		nodes := framework.KwokNodes(ctx, 2)
		node = nodes[0]
		framework.ExpectIdle(ctx, nodes, nil)
		intruder = framework.NewTenant(ctx, attacker.Namespace, "intruder")
		ginkgo.DeferCleanup(func(ctx context.Context) {
			victim.EndSpec(ctx, nodes, nil)
			attacker.DeleteWorkloads(ctx)
		})
	})

	forge := func(a schedv1alpha1.ReservationAllocation) string {
		ginkgo.GinkgoHelper()
		data, err := json.Marshal(a)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return string(data)
	}

	ginkgo.It("takes nothing from another tenant's reservation", func(ctx ginkgo.SpecContext) {
		ginkgo.By("checking the tenant may not write reservations")
		gomega.Expect(intruder.Can(ctx, "create", schedv1alpha1.SchemeGroupVersion.Group, "reservations", "", "")).To(gomega.BeFalse())
		_, err := intruder.Gantry.SchedulingV1alpha1().Reservations().Create(ctx,
			wrappers.MakeReservation(attacker.Namespace+"-own", "cpu", "1").OwnerPod(attacker.Namespace, "x").Obj(), metav1.CreateOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "want Forbidden, got %v", err)

		ginkgo.By("reserving 1 CPU on " + node.Name + " for the victim's pod owner")
		r := victim.CreateReservation(ctx, wrappers.MakeReservation("held", "cpu", "1").NodeName(node.Name).OwnerPod(victim.Namespace, "owner"))
		r = utilgomega.Must(util.WaitForReservation(ctx, util.LongTimeout, victim.Gantry, r.Name, "Available",
			func(r *schedv1alpha1.Reservation) bool { return r.Status.Phase == schedv1alpha1.ReservationAvailable }))

		ginkgo.By("creating, as the tenant, a pod on that node that claims the reservation with the highest priority")
		p := wrappers.MakePod("intruder", attacker.Namespace).OnNode(node.Name).Requests("cpu", "100m").
			Annotation(schedv1alpha1.AnnotationAllocated, forge(schedv1alpha1.ReservationAllocation{Name: r.Name, UID: r.UID, Priority: 2147483647})).
			NoGrace().Obj()
		_, err = intruder.Client.CoreV1().Pods(attacker.Namespace).Create(ctx, p, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		attacker.WaitScheduled(ctx, util.LongTimeout, "intruder")

		ginkgo.By("checking the reservation keeps all it holds, for its owner only")
		gomega.Consistently(ctx, func(g gomega.Gomega) {
			got, err := victim.Gantry.SchedulingV1alpha1().Reservations().Get(ctx, r.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(got.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable))
			g.Expect(got.Status.CurrentOwners).To(gomega.BeEmpty())
			g.Expect(got.Status.Allocated).To(gomega.BeEmpty())
		}).WithPolling(util.Interval).WithTimeout(5 * time.Second).Should(gomega.Succeed())
		owner := victim.CreatePod(ctx, wrappers.MakePod("owner", victim.Namespace).OnNode(node.Name).Requests("cpu", "1"))
		owner = victim.WaitScheduled(ctx, util.LongTimeout, owner.Name)
		var a schedv1alpha1.ReservationAllocation
		gomega.Expect(json.Unmarshal([]byte(owner.Annotations[schedv1alpha1.AnnotationAllocated]), &a)).To(gomega.Succeed(),
			"the owner was not placed in the reservation: %s", util.DescribePod(owner))
		gomega.Expect(a.UID).To(gomega.Equal(r.UID))
	})

	ginkgo.It("does not protect a pod from preemption", func(ctx ginkgo.SpecContext) {
		class := victim.Namespace + "-important"
		_, err := victim.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Value: 1000}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = victim.Client.SchedulingV1().PriorityClasses().Delete(ctx, class, metav1.DeleteOptions{})
		})

		ginkgo.By("filling " + node.Name + ", as the tenant, with a pod that claims the highest victim priority")
		cpu := node.Status.Allocatable.Cpu().String()
		p := wrappers.MakePod("squatter", attacker.Namespace).OnNode(node.Name).Requests("cpu", cpu).
			Annotation(schedv1alpha1.AnnotationAllocated, forge(schedv1alpha1.ReservationAllocation{Name: "invented", UID: "00000000-0000-0000-0000-000000000001", Priority: 2147483647})).
			NoGrace().Obj()
		_, err = intruder.Client.CoreV1().Pods(attacker.Namespace).Create(ctx, p, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		squatter := attacker.WaitScheduled(ctx, util.LongTimeout, "squatter")

		ginkgo.By("creating a pod of priority 1000 that needs that node")
		victim.CreatePod(ctx, wrappers.MakePod("important", victim.Namespace).OnNode(node.Name).Requests("cpu", "1").PriorityClass(class))
		victim.WaitScheduled(ctx, util.LongTimeout, "important")
		framework.Eventually(ctx, func() bool {
			_, err := intruder.Client.CoreV1().Pods(attacker.Namespace).Get(ctx, squatter.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).Should(gomega.BeTrue(), "the squatter was not preempted")
	})
})
