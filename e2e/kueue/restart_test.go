package kueue

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/test/util"
)

// bookingLog records, from a watch, every Reservation created for the
// spec's requests: how many pods each request had booked, summed over
// the Reservations created for it.
type bookingLog struct {
	mu     sync.Mutex
	booked map[string]int
	names  map[string]int
}

func (e *env) watchBookings(ctx context.Context) *bookingLog {
	ginkgo.GinkgoHelper()
	l := &bookingLog{booked: map[string]int{}, names: map[string]int{}}
	w, err := e.f.Gantry.SchedulingV1alpha1().Reservations().Watch(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(w.Stop)
	go func() {
		defer ginkgo.GinkgoRecover()
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*schedv1alpha1.Reservation)
			if !ok || ev.Type != watch.Added || !e.books(r) {
				continue
			}
			l.mu.Lock()
			l.booked[r.Annotations[provisioning.AnnotationRequest]] += provisioning.BookedPods(r)
			l.names[r.Name]++
			l.mu.Unlock()
		}
	}()
	return l
}

// expect checks that every request booked want pods and that no
// Reservation was created twice.
func (l *bookingLog) expect(requests, want int) {
	ginkgo.GinkgoHelper()
	l.mu.Lock()
	defer l.mu.Unlock()
	gomega.Expect(l.booked).To(gomega.HaveLen(requests), "requests that booked")
	for pr, n := range l.booked {
		gomega.Expect(n).To(gomega.Equal(want), "pods booked for %s", pr)
	}
	for name, n := range l.names {
		gomega.Expect(n).To(gomega.Equal(1), "Reservation %s created %d times", name, n)
	}
}

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
