package kueue

import (
	"fmt"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/test/util"
)

var _ = framework.Describe("Kueue and gantry-provisioner through restarts", ginkgo.Label(framework.LabelKueue), ginkgo.Serial, func() {
	f := framework.NewFramework("kueue-restart")
	var e *env

	ginkgo.BeforeEach(func() {
		if framework.TestContext.Local == nil {
			ginkgo.Skip("restarts components: needs a cluster made by gantry-cluster (make up, or the suite's own)")
		}
		e = newEnv(f)
		e.leaveNothing()
	})

	ginkgo.It("books every check-capacity Job once and ends every booking while gantry-provisioner, Kueue and Gantry's scheduler are killed mid-flow", ginkgo.Label(framework.LabelKindSample), func(ctx ginkgo.SpecContext) {
		e.queue(ctx, queueOptions{class: provv1.ClassCheckCapacity, cpu: "100"})
		bookings := e.watchBookings(ctx)
		const jobs = 6
		var names []string
		start := time.Now()
		scheduler := "kube-scheduler"
		if framework.TestContext.ControlPlane == cluster.ControlPlaneStock {
			scheduler = "gantry-scheduler" // the scheduler that honours bookings
		}
		for i, component := range []string{"gantry-provisioner", kueue.Component, scheduler} {
			for j := range jobs / 3 {
				name := fmt.Sprintf("restart-%d-%d", i, j)
				e.job(ctx, name, jobOptions{pods: 3, cpu: "100m"})
				names = append(names, name)
			}
			ginkgo.By("killing " + component + " with Jobs in flight")
			gomega.Expect(framework.TestContext.Local.RestartComponent(ctx, component, syscall.SIGKILL)).To(gomega.Succeed())
			if component == kueue.Component {
				// Until Kueue serves again, its webhooks refuse new Jobs,
				// as on any cluster.
				gomega.Expect(kueue.WaitReady(ctx, framework.TestContext.Config, util.LongTimeout, nil)).To(gomega.Succeed())
			}
		}
		e.waitJobsComplete(ctx, names...)
		ginkgo.GinkgoWriter.Printf("%d Jobs complete %s after the first was created, through three restarts\n", jobs, time.Since(start).Round(time.Millisecond))
		e.expectBookingsEnded(ctx, jobs, provisioning.ReasonCapacityBookingConsumed)
		bookings.expect(jobs, 3)
	})
})
