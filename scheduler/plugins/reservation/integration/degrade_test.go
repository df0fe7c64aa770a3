//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestSchedulesWithoutTheCRD: a scheduler started on a cluster without
// Gantry's CRDs (with Gantry's profile, so the Reservation plugin runs)
// still schedules plain pods, after its CRD sync timeout at the latest; and
// once the CRDs are installed, reservations work without a restart.
func TestSchedulesWithoutTheCRD(t *testing.T) {
	e := &env{Env: schedtest.SetupWithoutCRDs(t), t: t}
	e.CreateNodes(3, "4")
	ctx := context.Background()
	start := time.Now()
	e.startScheduler()

	pod, err := e.Client.CoreV1().Pods("default").Create(ctx, wrappers.MakePod("plain", "default").Requests("cpu", "1").Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := util.WaitForPod(ctx, util.LongTimeout, e.Client, pod.Namespace, pod.Name, "scheduled without the Reservation CRD",
		util.PodScheduled); err != nil {
		t.Fatal(err)
	}
	t.Logf("plain pod scheduled %s after the scheduler started (CRD sync timeout %s)",
		time.Since(start).Round(100*time.Millisecond), frameworkext.DefaultCRDSyncTimeout)

	names, err := framework.InstallGantryCRDs(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("installed CRDs %v", names)
	installed := time.Now()
	// InstallGantryCRDs returns once they are served.
	if _, err := e.Gantry.SchedulingV1alpha1().Reservations().Create(ctx, reservation("after-crd", "1", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := util.WaitForReservation(ctx, util.LongTimeout, e.Gantry, "after-crd", "Available once the CRD is installed",
		util.ReservationAvailable); err != nil {
		t.Fatal(err)
	}
	t.Logf("reservation Available %s after the CRDs were installed", time.Since(installed).Round(100*time.Millisecond))
}
