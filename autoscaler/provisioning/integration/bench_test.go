//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
)

// BenchmarkCheckCapacity100Requests: 100 check-capacity requests of 10
// one-CPU pods each, created at once on 20 nodes of 64 CPUs, with Gantry's
// scheduler placing the bookings and the provisioner deciding: the time
// from the first creation until every request is Provisioned=True (target
// under 10s). Run with:
//
//	go test -tags integration ./autoscaler/provisioning/integration -run '^$' -bench CheckCapacity100Requests -benchtime 1x
func BenchmarkCheckCapacity100Requests(b *testing.B) {
	for range b.N {
		b.StopTimer()
		e := &env{Env: schedtest.Setup(b), t: b}
		e.CreateNodes(20, "64")
		e.StartScheduler(schedtest.GantryProfile)
		e.startProvisioner()
		e.template("default", "workers", "1")
		b.StartTimer()
		start := time.Now()
		for i := range 100 {
			e.request("default", fmt.Sprintf("r-%03d", i), provv1.ClassCheckCapacity, "workers", 10, nil)
		}
		var booked, placed time.Duration
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			if rs, err := e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{}); err == nil {
				available := 0
				for _, r := range rs.Items {
					if r.Status.Phase == schedv1alpha1.ReservationAvailable {
						available++
					}
				}
				if booked == 0 && len(rs.Items) == 1000 {
					booked = time.Since(start)
				}
				if placed == 0 && available == 1000 {
					placed = time.Since(start)
				}
			}
			list, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			done := 0
			for _, pr := range list.Items {
				if meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned) {
					done++
				}
			}
			return done == 100, nil
		})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatalf("not every request Provisioned within 5m")
		}
		b.ReportMetric(elapsed.Seconds(), "s-to-all-provisioned")
		b.ReportMetric(booked.Seconds(), "s-to-all-booked")
		b.ReportMetric(placed.Seconds(), "s-to-all-placed")
	}
}
