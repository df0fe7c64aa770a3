package reservation

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

var _ = framework.Describe("Reservation allocation annotation", ginkgo.Label(framework.LabelReservation), ginkgo.Serial, func() {
	f := framework.NewFramework("reservation-forged")
	t := newTester(f)

	// A pod creator can write scheduling.gantry.dev/reservation-allocated
	// on any pod, bound ones included: only the live reservation (an owner
	// on its node) makes a pod count against it.
	ginkgo.It("is not trusted on a pod the reservation does not hold", func(ctx ginkgo.SpecContext) {
		node := &t.nodes[0]
		ginkgo.By(fmt.Sprintf("reserving 1 CPU on %s for pod owner", node.Name))
		r := t.CreateReservation(ctx, wrappers.MakeReservation("forged", "cpu", "1").
			NodeName(node.Name).OwnerPod(f.Namespace, "owner"))
		r = t.waitAvailable(ctx, r.Name)

		forged, err := json.Marshal(schedv1alpha1.ReservationAllocation{Name: r.Name, UID: r.UID, Priority: 2147483647})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.By("annotating a running non-owner pod on the reservation's node with the reservation's UID")
		intruder := t.CreatePod(ctx, wrappers.MakePod("intruder", f.Namespace).OnNode(node.Name).Requests("cpu", "100m"))
		intruder = t.WaitScheduled(ctx, util.LongTimeout, intruder.Name)
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{schedv1alpha1.AnnotationAllocated: string(forged)}}})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = f.Client.CoreV1().Pods(f.Namespace).Patch(ctx, intruder.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())

		ginkgo.By("checking the reservation stays Available, with no owner and all of its capacity")
		gomega.Consistently(ctx, func(g gomega.Gomega) {
			got, err := t.rsv.Get(ctx, r.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(got.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable), describeStatus(got))
			g.Expect(got.Status.CurrentOwners).To(gomega.BeEmpty(), describeStatus(got))
			nrs, err := getNodeReservations(ctx, node.Name)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			nr := findNodeReservation(nrs, r.Name)
			g.Expect(nr).NotTo(gomega.BeNil(), "reservation %s not in the scheduler's view of %s", r.Name, node.Name)
			g.Expect(nr.Allocated).To(gomega.BeEmpty())
			expectSameResources(g, nr.Remaining, r.Spec.Template.Requests, "remaining of %s", r.Name)
			t.checkAccounting(ctx, g)
		}).WithPolling(util.Interval).WithTimeout(5 * time.Second).Should(gomega.Succeed())

		ginkgo.By("checking the owner still gets the reservation")
		owner := t.CreatePod(ctx, wrappers.MakePod("owner", f.Namespace).OnNode(node.Name).Requests("cpu", "1"))
		owner = t.WaitScheduled(ctx, util.LongTimeout, owner.Name)
		expectAllocatedTo(gomega.Default, owner, r)
		t.waitReservation(ctx, r.Name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
			g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationSucceeded), describeStatus(r))
			g.Expect(ownerRefs(r)).To(gomega.Equal([]string{podRef(owner)}))
		})
	})
})
