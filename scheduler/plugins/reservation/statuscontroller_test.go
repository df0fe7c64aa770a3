package reservation

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	gantryfake "github.com/gantry-dev/gantry/crds/client/clientset/versioned/fake"
	gantryinformers "github.com/gantry-dev/gantry/crds/client/informers/externalversions"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	configv1 "github.com/gantry-dev/gantry/scheduler/apis/config/v1"
)

func TestStatusController(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	created := metav1.NewTime(now.Add(-time.Hour))
	// expiring is a pending reservation, created an hour ago, with ttl d.
	expiring := func(d time.Duration) *schedv1alpha1.Reservation {
		w := makeReservation("r", "2").TTL(d)
		w.CreationTimestamp = created
		return w.Obj()
	}
	// terminal is a reservation that has been in phase for since.
	terminal := func(phase schedv1alpha1.ReservationPhase, since time.Duration) *schedv1alpha1.Reservation {
		r := makeReservation("r", "2").Obj()
		r.Status.Phase = phase
		r.Status.Conditions = []metav1.Condition{{Type: schedv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: schedv1alpha1.ReasonExpired, LastTransitionTime: metav1.NewTime(now.Add(-since))}}
		return r
	}
	owner := allocated(ownerPod("p", "5"), makeReservation("r", "2").Obj(), "n1")
	owner.UID = "pod-p"
	// finished is owner once it has run to completion: the status worker
	// may first see it then (it ran fast, or the scheduler restarted).
	finished := owner.DeepCopy()
	finished.Status.Phase = v1.PodSucceeded

	tests := map[string]struct {
		r           *schedv1alpha1.Reservation
		pods        []*v1.Pod
		deleted     []*v1.Pod // observed deleted, after pods
		unsched     string
		wantPhase   schedv1alpha1.ReservationPhase
		wantReason  string // of the Ready condition, or Scheduled for pending
		wantOwners  int
		wantCPU     string
		wantDeleted bool
		wantAgain   time.Duration
	}{
		"pending past its ttl expires": {
			r: expiring(30 * time.Minute), wantPhase: schedv1alpha1.ReservationFailed, wantReason: schedv1alpha1.ReasonExpired,
			wantAgain: configv1.DefaultTerminalReservationTTL,
		},
		"pending before its ttl waits for it": {
			r: expiring(90 * time.Minute), wantPhase: schedv1alpha1.ReservationPending, wantReason: "Pending",
			wantAgain: 30 * time.Minute,
		},
		"unschedulable pending says why": {
			r: makeReservation("r", "2").Obj(), unsched: "0/1 nodes are available: 1 Insufficient cpu.",
			wantPhase: schedv1alpha1.ReservationPending, wantReason: schedv1alpha1.ReasonUnschedulable,
		},
		"available on a deleted node fails": {
			r: makeReservation("r", "2").Available("gone").Obj(), wantPhase: schedv1alpha1.ReservationFailed, wantReason: schedv1alpha1.ReasonNodeDeleted,
			wantAgain: configv1.DefaultTerminalReservationTTL,
		},
		"allocate once with a bound owner succeeds": {
			r: makeReservation("r", "2").Available("n1").Obj(), pods: []*v1.Pod{owner},
			wantPhase: schedv1alpha1.ReservationSucceeded, wantReason: schedv1alpha1.ReasonAllocated, wantOwners: 1, wantCPU: "2",
			wantAgain: configv1.DefaultTerminalReservationTTL,
		},
		"allocate once whose owner finished before its status was recorded succeeds": {
			r: makeReservation("r", "2").Available("n1").Obj(), pods: []*v1.Pod{finished},
			wantPhase: schedv1alpha1.ReservationSucceeded, wantReason: schedv1alpha1.ReasonAllocated, wantOwners: 1, wantCPU: "2",
			wantAgain: configv1.DefaultTerminalReservationTTL,
		},
		"allocate once whose owner ran and finished before its status was recorded succeeds": {
			r: makeReservation("r", "2").Available("n1").Obj(), pods: []*v1.Pod{owner, finished},
			wantPhase: schedv1alpha1.ReservationSucceeded, wantReason: schedv1alpha1.ReasonAllocated, wantOwners: 1, wantCPU: "2",
			wantAgain: configv1.DefaultTerminalReservationTTL,
		},
		"allocate once whose owner ran and was deleted before its status was recorded succeeds": {
			r: makeReservation("r", "2").Available("n1").Obj(), pods: []*v1.Pod{owner}, deleted: []*v1.Pod{owner},
			wantPhase: schedv1alpha1.ReservationSucceeded, wantReason: schedv1alpha1.ReasonAllocated, wantOwners: 1, wantCPU: "2",
			wantAgain: configv1.DefaultTerminalReservationTTL,
		},
		"shared whose owner finished stays available and records nobody": {
			r: makeReservation("r", "2").Available("n1").AllocateOnce(false).Obj(), pods: []*v1.Pod{owner, finished},
			wantPhase: schedv1alpha1.ReservationAvailable,
		},
		"shared with a bound owner stays available": {
			r: makeReservation("r", "2").Available("n1").AllocateOnce(false).Obj(), pods: []*v1.Pod{owner},
			wantPhase: schedv1alpha1.ReservationAvailable, wantOwners: 1, wantCPU: "2",
		},
		"terminal past the gc delay is deleted": {
			r: terminal(schedv1alpha1.ReservationFailed, 11*time.Minute), wantDeleted: true,
		},
		"terminal before the gc delay is kept": {
			r:         terminal(schedv1alpha1.ReservationSucceeded, 4*time.Minute),
			wantPhase: schedv1alpha1.ReservationSucceeded, wantReason: schedv1alpha1.ReasonExpired, wantAgain: 6 * time.Minute,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			logger, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			gc := gantryfake.NewSimpleClientset(tc.r)
			kc := k8sfake.NewSimpleClientset(node("n1", "8"))
			gi := gantryinformers.NewSharedInformerFactory(gc, 0)
			ki := informers.NewSharedInformerFactory(kc, 0)
			rl, nl := gi.Scheduling().V1alpha1().Reservations().Lister(), ki.Core().V1().Nodes().Lister()
			gi.Start(ctx.Done())
			ki.Start(ctx.Done())
			gi.WaitForCacheSync(ctx.Done())
			ki.WaitForCacheSync(ctx.Done())

			s := newStore(logger)
			s.upsert(tc.r)
			for _, p := range tc.pods {
				s.observePod(p, false)
			}
			for _, p := range tc.deleted {
				s.observePod(p, true)
			}
			if tc.unsched != "" {
				s.failed(tc.r.UID, tc.unsched)
			}
			c := &statusController{client: gc, reservation: rl, nodes: nl, store: s,
				clock: testingclock.NewFakeClock(now), terminalTTL: configv1.DefaultTerminalReservationTTL}

			again, err := c.reconcile(ctx, tc.r.Name)
			if err != nil {
				t.Fatal(err)
			}
			if again != tc.wantAgain {
				t.Errorf("look again after %v, want %v", again, tc.wantAgain)
			}
			got, err := gc.SchedulingV1alpha1().Reservations().Get(ctx, tc.r.Name, metav1.GetOptions{})
			if tc.wantDeleted {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("not deleted: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != tc.wantPhase {
				t.Errorf("phase %q, want %q", got.Status.Phase, tc.wantPhase)
			}
			condType := schedv1alpha1.ConditionReady
			if tc.wantPhase == schedv1alpha1.ReservationPending {
				condType = schedv1alpha1.ConditionScheduled
			}
			if cond := meta.FindStatusCondition(got.Status.Conditions, condType); tc.wantReason != "" && (cond == nil || cond.Reason != tc.wantReason) {
				t.Errorf("%s condition %+v, want reason %s", condType, cond, tc.wantReason)
			} else if tc.unsched != "" && cond.Message != tc.unsched {
				t.Errorf("message %q, want the scheduler's %q", cond.Message, tc.unsched)
			}
			if len(got.Status.CurrentOwners) != tc.wantOwners {
				t.Errorf("current owners %v, want %d", got.Status.CurrentOwners, tc.wantOwners)
			}
			if tc.wantCPU != "" {
				// The owner asked for 5 CPU; only the 2 it holds count as allocated from it.
				if q := got.Status.Allocated[v1.ResourceCPU]; q.String() != tc.wantCPU {
					t.Errorf("allocated cpu %s, want %s", q.String(), tc.wantCPU)
				}
			}
		})
	}
}
