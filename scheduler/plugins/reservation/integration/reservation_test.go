//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// env is three nodes of 4 CPUs for Gantry's scheduler.
type env struct {
	*schedtest.Env
	t *testing.T
}

func setup(t *testing.T) *env {
	e := &env{Env: schedtest.Setup(t), t: t}
	e.CreateNodes(3, "4")
	return e
}

func (e *env) startScheduler() *schedtest.Scheduler { return e.StartScheduler(schedtest.GantryProfile) }

// reservation is for app=owner pods of namespace default.
func reservation(name, cpu string, allocateOnce bool) *schedv1alpha1.Reservation {
	return wrappers.MakeReservation(name, "cpu", cpu).
		OwnerLabels("default", map[string]string{"app": "owner"}).AllocateOnce(allocateOnce).Obj()
}

func ownerPod(name, cpu string) *v1.Pod {
	return wrappers.MakePod(name, "default").Label("app", "owner").Requests("cpu", cpu).Obj()
}

// expectedCPU is what the scheduler's cache must hold on each node, derived
// from the API alone: bound pods, plus each Available reservation's template
// less what its bound owners requested (nothing once an allocate-once
// reservation has an owner).
func (e *env) expectedCPU(ctx context.Context) (map[string]int64, error) {
	want := map[string]int64{}
	pods, err := e.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	used := map[string]int64{} // by reservation name
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		reqs := resourcehelper.PodRequests(&p, resourcehelper.PodResourcesOptions{})
		req := reqs.Cpu().MilliValue()
		want[p.Spec.NodeName] += req
		if a := p.Annotations[schedv1alpha1.AnnotationAllocated]; a != "" {
			var alloc schedv1alpha1.ReservationAllocation
			if err := jsonUnmarshal(a, &alloc); err == nil {
				used[alloc.Name] += req
			}
		}
	}
	rs, err := e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, r := range rs.Items {
		if r.Status.Phase != schedv1alpha1.ReservationAvailable {
			continue
		}
		if *r.Spec.AllocateOnce && (used[r.Name] > 0 || len(r.Status.CurrentOwners) > 0) {
			continue
		}
		want[r.Status.NodeName] += max(0, r.Spec.Template.Requests.Cpu().MilliValue()-used[r.Name])
	}
	return want, nil
}

// cacheCPU is what the scheduler's cache holds on each node.
func cacheCPU(rs *schedtest.Scheduler) map[string]int64 {
	got := map[string]int64{}
	for i := range 3 {
		name := fmt.Sprintf("node-%d", i)
		if ni, err := rs.Sched.Cache.GetNode(name); err == nil {
			if v := ni.GetRequested().GetMilliCPU(); v > 0 {
				got[name] = v
			}
		}
	}
	return got
}

// settle waits until the scheduler's cache agrees with the API, and fails
// the test with both views if it does not.
func (e *env) settle(rs *schedtest.Scheduler, what string) {
	e.t.Helper()
	var want, got map[string]int64
	err := util.Poll(context.Background(), util.LongTimeout, what+": scheduler cache agrees with the API", func(ctx context.Context) (bool, error) {
		w, err := e.expectedCPU(ctx)
		if err != nil {
			return false, err
		}
		want, got = w, cacheCPU(rs)
		return maps.Equal(want, got), nil
	})
	if err != nil {
		for i := range 3 {
			if ni, err := rs.Sched.Cache.GetNode(fmt.Sprintf("node-%d", i)); err == nil {
				for _, p := range ni.GetPods() {
					pod := p.GetPod()
					e.t.Logf("node-%d holds %s/%s %s", i, pod.Namespace, pod.Name, pod.Spec.Containers[0].Resources.Requests.Cpu())
				}
			}
		}
		list, _ := e.Gantry.SchedulingV1alpha1().Reservations().List(context.Background(), metav1.ListOptions{})
		for _, r := range list.Items {
			e.t.Logf("reservation %s: %s on %q owners %v", r.Name, r.Status.Phase, r.Status.NodeName, r.Status.CurrentOwners)
		}
		e.t.Fatalf("%v; scheduler cache (milli-CPU by node) %v, API says %v", err, got, want)
	}
}

// TestNoLeakUnderChurnAndRestart: 40 reservations for 24 slots, deletes of
// reservations while they are being placed and consumed, owner pods taking
// them, then a scheduler restart. After each phase, the scheduler's
// accounting must equal what the API implies.
func TestNoLeakUnderChurnAndRestart(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	rs := e.startScheduler()
	rsv := e.Gantry.SchedulingV1alpha1().Reservations()
	rng := rand.New(rand.NewPCG(1, 2))

	for i := range 40 {
		if _, err := rsv.Create(ctx, reservation(fmt.Sprintf("r-%02d", i), "500m", i%4 != 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Delete some right away: they may be queued, in a scheduling
		// cycle or binding when the delete lands.
		if rng.IntN(4) == 0 {
			if err := rsv.Delete(ctx, fmt.Sprintf("r-%02d", i), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	util.Must(t).Poll(ctx, util.LongTimeout, "reservations placed", func(ctx context.Context) (bool, error) {
		list, err := rsv.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		available := 0
		for _, r := range list.Items {
			if r.Status.Phase == schedv1alpha1.ReservationAvailable {
				available++
			}
		}
		// 3 nodes of 4 CPU hold 24 reservations of 500m.
		if want := min(24, len(list.Items)); available != want {
			return false, fmt.Errorf("%d of %d reservations Available, want %d", available, len(list.Items), want)
		}
		return true, nil
	})
	e.settle(rs, "after creating and deleting reservations")

	// Owner pods take reservations while more reservations are deleted.
	for i := range 12 {
		if _, err := e.Client.CoreV1().Pods("default").Create(ctx, ownerPod(fmt.Sprintf("owner-%02d", i), "300m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := rsv.Delete(ctx, fmt.Sprintf("r-%02d", 39-i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	if err := util.Poll(ctx, util.LongTimeout, "owner pods scheduled", func(ctx context.Context) (bool, error) {
		pods, err := e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				return false, fmt.Errorf("pod %s pending", p.Name)
			}
		}
		return true, nil
	}); err != nil {
		pods, _ := e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				t.Logf("pending %s: %+v", p.Name, p.Status.Conditions)
			}
		}
		t.Fatalf("%v; cache %v", err, cacheCPU(rs))
	}
	e.settle(rs, "after owners bound")

	allocated := 0
	pods, _ := e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		if p.Annotations[schedv1alpha1.AnnotationAllocated] != "" {
			allocated++
		}
	}
	if allocated == 0 {
		t.Fatal("no owner pod was placed in a reservation: the test exercised nothing")
	}
	t.Logf("%d of %d owner pods placed in reservations", allocated, len(pods.Items))

	// Restart: a new scheduler rebuilds everything from the API.
	before := cacheCPU(rs)
	rs.Stop()
	rs = e.startScheduler()
	e.settle(rs, "after restart")
	if after := cacheCPU(rs); !maps.Equal(before, after) {
		t.Errorf("restart changed the accounting: before %v, after %v", before, after)
	}

	// Deleting every reservation releases everything they held.
	list, _ := rsv.List(ctx, metav1.ListOptions{})
	for _, r := range list.Items {
		_ = rsv.Delete(ctx, r.Name, metav1.DeleteOptions{})
	}
	e.settle(rs, "after deleting every reservation")
}
