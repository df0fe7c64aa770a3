//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
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
		e := newEnv(b)
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
		err := util.Poll(context.Background(), util.BenchmarkTimeout, "every request Provisioned", func(ctx context.Context) (bool, error) {
			if rs, err := e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{}); err == nil {
				pods := 0
				for _, r := range rs.Items {
					pods += provisioning.BookedPods(&r)
				}
				if booked == 0 && pods == 1000 {
					booked = time.Since(start)
				}
				if placed == 0 && placedPods(rs.Items) == 1000 {
					placed = time.Since(start)
				}
			}
			list, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			done := 0
			for _, pr := range list.Items {
				if meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned) {
					done++
				}
			}
			return done == 100, fmt.Errorf("%d of 100 requests Provisioned", done)
		})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(elapsed.Seconds(), "s-to-all-provisioned")
		b.ReportMetric(booked.Seconds(), "s-to-all-booked")
		b.ReportMetric(placed.Seconds(), "s-to-all-placed")
	}
}

// BenchmarkAtomicScaleUp100Nodes: one atomic request of 100 pods of 3
// CPUs, each needing a new 4-CPU kwok node of its own: the time from the
// request's creation to Provisioned=True (target under 30s), with the
// phases: all 100 nodes created, all Ready, all bookings placed. A test
// kubelet makes nodes Ready as the kwok controller does. Run with:
//
//	go test -tags integration ./autoscaler/provisioning/integration -run '^$' -bench AtomicScaleUp100Nodes -benchtime 1x
func BenchmarkAtomicScaleUp100Nodes(b *testing.B) {
	for range b.N {
		b.StopTimer()
		e := newEnv(b)
		e.StartScheduler(schedtest.GantryProfile)
		e.startKubelet()
		e.startProvisioner(e.withNodeGroups)
		e.template("default", "workers", "3")
		e.class("atomic-wide", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"wide"}})
		b.StartTimer()
		start := time.Now()
		e.request("default", "hundred", "atomic-wide", "workers", 100, nil)
		var created, ready, placed time.Duration
		err := util.Poll(context.Background(), util.BenchmarkTimeout, "request hundred Provisioned", func(ctx context.Context) (bool, error) {
			nodes := e.groupNodes("wide")
			if created == 0 && len(nodes) == 100 {
				created = time.Since(start)
			}
			up := 0
			for i := range nodes {
				if isReady(&nodes[i]) && len(nodes[i].Spec.Taints) == 0 {
					up++
				}
			}
			if ready == 0 && up == 100 {
				ready = time.Since(start)
			}
			if rs, err := e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{}); err == nil && placed == 0 {
				if placedPods(rs.Items) == 100 {
					placed = time.Since(start)
				}
			}
			pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "hundred", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned), errors.New(util.DescribeProvisioningRequest(pr))
		})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if placed == 0 {
			// Provisioned=True is written only once every booking is placed.
			placed = elapsed
		}
		if n := len(e.groupNodes("wide")); n != 100 {
			b.Fatalf("%d nodes, want 100", n)
		}
		b.ReportMetric(elapsed.Seconds(), "s-to-provisioned")
		b.ReportMetric(created.Seconds(), "s-to-nodes-created")
		b.ReportMetric(ready.Seconds(), "s-to-nodes-ready")
		b.ReportMetric(placed.Seconds(), "s-to-bookings-placed")
	}
}
