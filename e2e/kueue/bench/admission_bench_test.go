//go:build kueue_bench

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// AdmissionFile is the file of $ARTIFACTS that BenchmarkKueueAdmission
// appends one line a run to (benchutil.AppendJSON).
const AdmissionFile = "kueue-admission.jsonl"

// jobCPU is what each of a Job's pods requests: small, so that quota and
// nodes hold every Job of the largest run at once.
const jobCPU = "100m"

// BenchmarkKueueAdmission: Jobs through Kueue to Admitted, with
// gantry-provisioner answering Kueue's check-capacity ProvisioningRequests.
// For each -jobs count J, on the cluster's -nodes kwok nodes: a namespace
// of its own with a ClusterQueue (quota for every Job), its
// ProvisioningRequestConfig (check-capacity), AdmissionCheck and
// LocalQueue; then J Jobs of -pods-per-job pods of 100m CPU, created at
// once through an unthrottled client (16 in flight); the run ends when
// every Workload is Admitted. Then the Jobs are left to complete (kwok
// ends their pods) and everything of the run is deleted, and found gone,
// before the next. Run with (`make bench-kueue` runs it so):
//
//	go test -tags kueue_bench ./e2e/kueue/bench -run '^$' -bench KueueAdmission -benchtime 1x -timeout 3h -args -nodes=500 -jobs=100,500
func BenchmarkKueueAdmission(b *testing.B) {
	counts, err := jobCounts(*jobsFlag)
	if err != nil {
		b.Fatal(err)
	}
	bc := sharedCluster(b)
	for _, jobs := range counts {
		b.Run(fmt.Sprintf("%dNodes/%dJobs", bc.nodes, jobs), func(b *testing.B) {
			for range b.N {
				res := runAdmission(b, bc, jobs)
				b.ReportMetric(res.PerSecond, "admissions/s")
				b.ReportMetric(res.Total["p50"], "admitted-p50-ms")
				b.ReportMetric(res.Total["p99"], "admitted-p99-ms")
				b.ReportMetric(res.Kueue["p99"], "kueue-p99-ms")
				b.ReportMetric(res.Provisioner["p99"], "provisioner-p99-ms")
				b.ReportMetric(float64(res.ProvisionerLarger), "provisioner-larger")
				recordResult(res)
				if err := benchutil.AppendJSON(AdmissionFile, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func jobCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-jobs=%q: want comma-separated positive counts", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// admissionResult is one run, as AdmissionFile records it. Latencies are
// in milliseconds, keyed p50/p90/p99/max (benchutil.LatencyPercentiles),
// over the Jobs admitted.
type admissionResult struct {
	Nodes       int `json:"nodes"`
	Jobs        int `json:"jobs"`
	PodsPerJob  int `json:"podsPerJob"`
	Admitted    int `json:"admitted"`
	Timed       int `json:"timed"`
	RequestsRun int `json:"requests"`
	// Failed counts the requests seen Failed=True (Kueue retries them).
	Failed int `json:"failedRequests"`
	// PerSecond is Admitted over the window from the first Job seen
	// created to the last Workload seen Admitted; CreateS is how long
	// creating the Jobs took.
	PerSecond float64 `json:"admissionsPerSecond"`
	WindowS   float64 `json:"windowSeconds"`
	CreateS   float64 `json:"createSeconds"`
	// Total is Job created → Admitted; Kueue and Provisioner its two parts;
	// QuotaReserved is Job created → QuotaReserved (within Kueue's first
	// part); ProvisionerLarger counts the Jobs whose provisioner part was
	// larger than Kueue's.
	Total             map[string]float64 `json:"totalMs"`
	Kueue             map[string]float64 `json:"kueueMs"`
	Provisioner       map[string]float64 `json:"provisionerMs"`
	QuotaReserved     map[string]float64 `json:"quotaReservedMs"`
	ProvisionerLarger int                `json:"provisionerLarger"`
	// Completed counts the Jobs complete within a minute of the last
	// admission; CleanupS is how long deleting the run's objects took.
	Completed int     `json:"completed"`
	CleanupS  float64 `json:"cleanupSeconds"`
}

func runAdmission(b *testing.B, bc *benchCluster, jobs int) admissionResult {
	b.StopTimer()
	ctx := context.Background()
	ns := bc.namespace(b)
	bc.queue(b, ns, jobs)
	rec, err := bc.record(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.stop()

	b.StartTimer()
	createStart := time.Now()
	benchutil.InParallel(b, jobs, 16, func(i int) error {
		_, err := bc.client.BatchV1().Jobs(ns).Create(ctx, job(ns, fmt.Sprintf("job-%04d", i), int32(*podsFlag)), metav1.CreateOptions{})
		return err
	})
	createTaken := time.Since(createStart)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, *timeoutFlag, true, func(context.Context) (bool, error) {
		return rec.admitted() >= jobs, nil
	})
	b.StopTimer()
	if err != nil {
		// Recorded all the same: how far a run got says what its rate is.
		b.Errorf("%d of %d Workloads Admitted after %s: %v", rec.admitted(), jobs, *timeoutFlag, err)
	}
	res := rec.result()
	res.Nodes, res.Jobs, res.PodsPerJob, res.CreateS = bc.nodes, jobs, *podsFlag, createTaken.Seconds()
	res.Completed = bc.waitComplete(ns, jobs, time.Minute)
	cleanStart := time.Now()
	bc.cleanUp(b, ns)
	res.CleanupS = time.Since(cleanStart).Seconds()
	b.Logf("%d Jobs on %d nodes: %.1f admissions/s; Job → Admitted ms %v; Kueue's part %v; the provisioner's %v; provisioner larger in %d; %d requests (%d Failed); %d complete; cleaned up in %.1f s",
		jobs, bc.nodes, res.PerSecond, res.Total, res.Kueue, res.Provisioner, res.ProvisionerLarger, res.RequestsRun, res.Failed, res.Completed, res.CleanupS)
	return res
}

const (
	localQueueName = "queue"
)

// namespace creates the run's namespace.
func (bc *benchCluster) namespace(b *testing.B) string {
	b.Helper()
	ns, err := bc.client.CoreV1().Namespaces().Create(context.Background(), &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kueue-bench-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return ns.Name
}

// queue makes the run's ResourceFlavor, ProvisioningRequestConfig
// (check-capacity), AdmissionCheck, ClusterQueue (CPU quota twice what
// the Jobs ask) and LocalQueue, all named after namespace ns, and waits
// until the ClusterQueue is active.
func (bc *benchCluster) queue(b *testing.B, ns string, jobs int) {
	b.Helper()
	ctx := context.Background()
	cpu := resource.MustParse(jobCPU)
	cpu.Mul(int64(2 * jobs * *podsFlag))
	q := kueue.Queue{Name: ns, Namespace: ns, LocalQueue: localQueueName, Class: provv1.ClassCheckCapacity, CPU: cpu.String(), Memory: "100Ti"}
	for _, o := range q.Objects() {
		if _, err := bc.dyn.Resource(o.Resource).Namespace(o.GetNamespace()).Create(ctx, o.Unstructured, metav1.CreateOptions{}); err != nil {
			b.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cq, err := bc.dyn.Resource(kueue.ClusterQueues).Get(ctx, ns, metav1.GetOptions{})
		return err == nil && kueue.ConditionStatus(cq, "Active") == "True", nil
	})
	if err != nil {
		b.Fatalf("ClusterQueue %s not active: %v", ns, err)
	}
}

// job is a Job of pods pods of jobCPU in the run's LocalQueue; kwok
// completes its pods about a second after they start.
func job(ns, name string, pods int32) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{kueue.QueueNameLabel: localQueueName}},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(pods), Completions: ptr.To(pods), BackoffLimit: ptr.To[int32](3),
			Template: v1.PodTemplateSpec{Spec: v1.PodSpec{
				RestartPolicy: v1.RestartPolicyNever,
				SchedulerName: wrappers.DefaultSchedulerName,
				Containers: []v1.Container{{Name: "work", Image: wrappers.PauseImage, Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(jobCPU), v1.ResourceMemory: resource.MustParse("64Mi")},
				}}},
			}},
		},
	}
}

// waitComplete waits up to timeout for the run's Jobs to complete and
// returns how many did.
func (bc *benchCluster) waitComplete(ns string, jobs int, timeout time.Duration) int {
	done := 0
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := bc.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		done = 0
		for _, j := range list.Items {
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete && c.Status == v1.ConditionTrue {
					done++
				}
			}
		}
		return done >= jobs, nil
	})
	return done
}

// cleanUp deletes the run's Jobs and waits until their Workloads, requests
// and Reservations and the pods are gone, then deletes the run's queue
// objects and namespace: the next run starts on an idle cluster.
func (bc *benchCluster) cleanUp(b *testing.B, ns string) {
	b.Helper()
	ctx := context.Background()
	bg := metav1.DeletePropagationBackground
	if err := bc.client.BatchV1().Jobs(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	left := ""
	// Kueue takes its finalizers off one Workload at a time: 500 Jobs take
	// minutes on 2 cores.
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = bc.leftOf(ctx, ns)
		return left == "", nil
	})
	if err != nil {
		b.Fatalf("after deleting the Jobs of %s: %s left", ns, left)
	}
	for _, gvr := range []schema.GroupVersionResource{kueue.ClusterQueues, kueue.AdmissionChecks, kueue.ProvisioningRequestConfigs, kueue.ResourceFlavors} {
		if err := bc.dyn.Resource(gvr).Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			b.Fatalf("deleting %s %s: %v", gvr.Resource, ns, err)
		}
	}
	if err := bc.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := bc.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		b.Fatalf("namespace %s not gone: %v", ns, err)
	}
}

// leftOf describes what of namespace ns's run is still there ("" when
// nothing).
func (bc *benchCluster) leftOf(ctx context.Context, ns string) string {
	var left []string
	count := func(what string, n int, err error) {
		if err != nil {
			left = append(left, what+": "+err.Error())
		} else if n > 0 {
			left = append(left, fmt.Sprintf("%d %s", n, what))
		}
	}
	jobs, err := bc.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	count("Jobs", len(jobs.Items), err)
	pods, err := bc.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	count("pods", len(pods.Items), err)
	wls, err := bc.dyn.Resource(kueue.Workloads).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		count("Workloads", len(wls.Items), nil)
	} else {
		count("Workloads", 0, err)
	}
	prs, err := bc.gantry.AutoscalingXV1().ProvisioningRequests(ns).List(ctx, metav1.ListOptions{})
	count("ProvisioningRequests", len(prs.Items), err)
	rs, err := bc.gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID})
	n := 0
	if err == nil {
		for _, r := range rs.Items {
			if strings.HasPrefix(r.Annotations[provisioning.AnnotationRequest], ns+"/") {
				n++
			}
		}
	}
	count("Reservations", n, err)
	return strings.Join(left, ", ")
}

// results are this process's runs, for the table TestMain prints.
var (
	resultsMu sync.Mutex
	results   []admissionResult
)

func recordResult(r admissionResult) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, r)
}
