//go:build scheduler_perf

package cost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
)

// What one reservation status write costs kube-apiserver and etcd, by how
// it is sent. BenchmarkReservationCost puts a consumed reservation's
// status write (Available to Succeeded) at 6-7 ms of CPU, about half of
// what creating, scheduling and binding a pod costs; this benchmark
// measures that write alone, without a scheduler, so that ways of sending
// it can be compared in minutes and side by side. Each sub-benchmark
// creates statusWrites reservations and makes them Available as the
// scheduler does (not measured), then writes them Succeeded with their
// owner, as the status controller does, from four goroutines (its
// workers), with a watch of them open, as the scheduler's informer has. It
// reports kube-apiserver's and etcd's CPU time per write and
// kube-apiserver's allocations per write (go_memstats_alloc_bytes_total).
//
// PodStatus is the reference: the same number of status writes of a
// built-in type (a pod condition, as a kubelet writes), in the same run.
const (
	statusWrites       = 2000
	statusWriteWorkers = 4
)

func BenchmarkReservationStatusWrite(b *testing.B) {
	for _, v := range []struct {
		name  string
		write func(context.Context, *schedtest.Env, *schedv1alpha1.Reservation) error
	}{
		// As the status controller writes it: the informer's object, its
		// managed fields included, through the status subresource.
		{"Update", func(ctx context.Context, e *schedtest.Env, r *schedv1alpha1.Reservation) error {
			_, err := e.Gantry.SchedulingV1alpha1().Reservations().UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: "gantry-scheduler"})
			return err
		}},
		// The same without managed fields, which kube-apiserver ignores on
		// a subresource (it keeps the stored ones).
		{"UpdateWithoutManagedFields", func(ctx context.Context, e *schedtest.Env, r *schedv1alpha1.Reservation) error {
			r.ManagedFields = nil
			_, err := e.Gantry.SchedulingV1alpha1().Reservations().UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: "gantry-scheduler"})
			return err
		}},
		// Only what the status subresource keeps of the request: the
		// object's identity, its resourceVersion and its status.
		{"UpdateStatusOnly", func(ctx context.Context, e *schedtest.Env, r *schedv1alpha1.Reservation) error {
			slim := &schedv1alpha1.Reservation{
				ObjectMeta: metav1.ObjectMeta{Name: r.Name, UID: r.UID, ResourceVersion: r.ResourceVersion},
				Status:     r.Status,
			}
			_, err := e.Gantry.SchedulingV1alpha1().Reservations().UpdateStatus(ctx, slim, metav1.UpdateOptions{FieldManager: "gantry-scheduler"})
			return err
		}},
		// A JSON merge patch of status, guarded by resourceVersion.
		{"MergePatch", func(ctx context.Context, e *schedtest.Env, r *schedv1alpha1.Reservation) error {
			patch, err := json.Marshal(map[string]any{
				"metadata": map[string]any{"uid": r.UID, "resourceVersion": r.ResourceVersion},
				"status":   r.Status,
			})
			if err != nil {
				return err
			}
			_, err = e.Gantry.SchedulingV1alpha1().Reservations().Patch(ctx, r.Name, types.MergePatchType, patch,
				metav1.PatchOptions{FieldManager: "gantry-scheduler"}, "status")
			return err
		}},
		// Not a status write: the delete that ends a terminal
		// reservation's life (TerminalReservationTTL), for comparison.
		{"Delete", func(ctx context.Context, e *schedtest.Env, r *schedv1alpha1.Reservation) error {
			return e.Gantry.SchedulingV1alpha1().Reservations().Delete(ctx, r.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &r.UID}})
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			benchutil.QuietSchedulerLogs(b)
			runStatusWrites(b, v.write)
		})
	}
	b.Run("PodStatus", func(b *testing.B) {
		benchutil.QuietSchedulerLogs(b)
		runPodStatusWrites(b)
	})
}

// runStatusWrites creates statusWrites Available reservations, then
// measures write on each after setting the status the status controller
// gives a consumed reservation.
func runStatusWrites(b *testing.B, write func(context.Context, *schedtest.Env, *schedv1alpha1.Reservation) error) {
	b.StopTimer()
	e := benchutil.SetupUnthrottled(b)
	ctx := context.Background()
	rs := e.Gantry.SchedulingV1alpha1().Reservations()
	available := make([]*schedv1alpha1.Reservation, statusWrites)
	benchutil.InParallel(b, statusWrites, 16, func(i int) error {
		r, err := rs.Create(ctx, benchutil.OwnerReservation(i), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// As the scheduler's Bind of a reservation writes it.
		node := fmt.Sprintf("node-%d", i)
		r.Status.Phase = schedv1alpha1.ReservationAvailable
		r.Status.NodeName = node
		r.Status.Allocatable = r.Spec.Template.Requests
		benchCondition(r, schedv1alpha1.ConditionScheduled, metav1.ConditionTrue, schedv1alpha1.ReasonScheduled, "placed on node "+node)
		benchCondition(r, schedv1alpha1.ConditionReady, metav1.ConditionTrue, schedv1alpha1.ReasonAvailable, "capacity is held for the reservation's owners")
		available[i], err = rs.UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: "gantry-scheduler"})
		return err
	})
	watchFrom := func(ctx context.Context) (watch.Interface, error) {
		l, err := rs.List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return nil, err
		}
		return rs.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	}
	measureWrites(b, e, watchFrom, func(i int) error {
		// As the status controller records a consumption.
		r := available[i].DeepCopy()
		owner := fmt.Sprintf("owner-%d", i)
		r.Status.Phase = schedv1alpha1.ReservationSucceeded
		r.Status.CurrentOwners = []v1.ObjectReference{{Kind: "Pod", APIVersion: "v1", Namespace: "owners", Name: owner,
			UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))}}
		r.Status.Allocated = r.Spec.Template.Requests
		benchCondition(r, schedv1alpha1.ConditionReady, metav1.ConditionFalse, schedv1alpha1.ReasonAllocated,
			"allocated to pod owners/"+owner+"; what it does not use is released")
		return write(ctx, e, r)
	})
}

// runPodStatusWrites is runStatusWrites for pods: statusWrites pods
// created (not measured), then a condition written into each one's status.
func runPodStatusWrites(b *testing.B) {
	b.StopTimer()
	e := benchutil.SetupUnthrottled(b)
	ctx := context.Background()
	pods := make([]*v1.Pod, statusWrites)
	benchutil.InParallel(b, statusWrites, 16, func(i int) error {
		p, err := e.Client.CoreV1().Pods("default").Create(ctx, benchutil.Pod(fmt.Sprintf("pod-%d", i), ""), metav1.CreateOptions{})
		pods[i] = p
		return err
	})
	watchFrom := func(ctx context.Context) (watch.Interface, error) {
		l, err := e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return nil, err
		}
		return e.Client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	}
	measureWrites(b, e, watchFrom, func(i int) error {
		p := pods[i].DeepCopy()
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: "gantry.dev/bench", Status: v1.ConditionTrue,
			Reason: "Bench", Message: "a status write of a built-in type", LastTransitionTime: metav1.Now()})
		_, err := e.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: "gantry-bench"})
		return err
	})
}

// measureWrites runs write(0..statusWrites-1) from statusWriteWorkers
// goroutines, with a watch of the objects written open (from watchFrom),
// as the scheduler's informer watches reservations. It reports the writes'
// rate and what kube-apiserver and etcd spent on each, up to the moment the
// watch has delivered every write.
func measureWrites(b *testing.B, e *schedtest.Env, watchFrom func(context.Context) (watch.Interface, error), write func(int) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := watchFrom(ctx)
	if err != nil {
		b.Fatalf("watching what is written: %v", err)
	}
	defer w.Stop()
	var seen atomic.Int64
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified || ev.Type == watch.Deleted {
				seen.Add(1)
			}
		}
	}()
	saveAllocs, err := benchutil.StartProfiles(b.Name(), e.Client.CoreV1().RESTClient(), benchutil.Profiles{APIServerAllocs: true})
	if err != nil {
		b.Error(err)
	}
	allocBefore := apiserverAllocBytes(b, e)
	cpuBefore := benchutil.ProcessCPU()
	b.StartTimer()
	start := time.Now()
	benchutil.InParallel(b, statusWrites, statusWriteWorkers, write)
	elapsed := time.Since(start)
	b.StopTimer()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return seen.Load() >= statusWrites, nil
	}); err != nil {
		b.Fatalf("the watch delivered %d of %d writes: %v", seen.Load(), statusWrites, err)
	}
	cpuAfter := benchutil.ProcessCPU()
	allocAfter := apiserverAllocBytes(b, e)
	if err := saveAllocs(); err != nil {
		b.Error(err)
	}
	b.ReportMetric(statusWrites/elapsed.Seconds(), "writes/s")
	for _, p := range []struct{ name, unit string }{
		{"", "client-cpu-ms/write"}, {"kube-apiserver", "apiserver-cpu-ms/write"}, {"etcd", "etcd-cpu-ms/write"},
	} {
		b.ReportMetric(float64((cpuAfter[p.name]-cpuBefore[p.name]).Microseconds())/1000/statusWrites, p.unit)
	}
	b.ReportMetric((allocAfter-allocBefore)/1024/statusWrites, "apiserver-alloc-KB/write")
}

func benchCondition(r *schedv1alpha1.Reservation, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: r.Generation,
	})
}

// apiserverAllocBytes is kube-apiserver's go_memstats_alloc_bytes_total:
// the bytes it has allocated since it started.
func apiserverAllocBytes(b *testing.B, e *schedtest.Env) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := e.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("kube-apiserver's metrics: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_alloc_bytes_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("kube-apiserver's go_memstats_alloc_bytes_total %q: %v", v, err)
			}
			return f
		}
	}
	b.Fatalf("kube-apiserver's metrics have no go_memstats_alloc_bytes_total")
	return 0
}
