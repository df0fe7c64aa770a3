//go:build soak

package soak

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// opJob is a Job queued in Kueue, admitted through a check-capacity
// ProvisioningRequest that gantry-provisioner serves, run to completion.
const opJob = "Job through Kueue"

const (
	// jobQueue is the LocalQueue of every tenant's jobs namespace.
	jobQueue = "soak"
	// jobQueueCPU is the CPU quota of each tenant's ClusterQueue: two of
	// the largest Jobs.
	jobQueueCPU = "2"
	// annotationRunFor is the annotation of Gantry's kwok stage
	// gantry-pod-run-for (kind/config/kwok/stages.yaml): the pod succeeds
	// that long after it started. Without it kwok completes a Job's pod
	// about a second after it started.
	annotationRunFor = "kwok.gantry.dev/run-for"
	// jobTimeout is how long a Job may take from its creation to its
	// completion before it counts as unplaced: the request's validity,
	// Kueue's first retry after a request that failed, and its run.
	jobTimeout = requestValidity + 3*time.Minute
	// kueueDown is how long a Job's create is retried while Kueue's
	// webhooks do not answer (Kueue is being restarted).
	kueueDown = 2 * time.Minute
)

// kueueQueue makes the Kueue objects of a tenant's jobs namespace (a
// ClusterQueue whose admission check is a check-capacity
// ProvisioningRequest valid for requestValidity, and the LocalQueue
// jobQueue), deleted after the run, and waits until the ClusterQueue is
// active.
func kueueQueue(ctx context.Context, w *world, ns string) error {
	q := kueue.Queue{
		Name: ns, Namespace: ns, LocalQueue: jobQueue, Class: provv1.ClassCheckCapacity, CPU: jobQueueCPU, Memory: "1Ti",
		Parameters: map[string]any{provv1.ParameterValidUntilSeconds: fmt.Sprint(int(requestValidity.Seconds()))},
	}
	objs := q.Objects()
	ginkgo.DeferCleanup(func(ctx context.Context) {
		for _, o := range slices.Backward(objs) {
			err := w.dyn.Resource(o.Resource).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				ginkgo.GinkgoWriter.Printf("deleting %s %s: %v\n", o.GetKind(), o.GetName(), err)
			}
		}
	})
	for _, o := range objs {
		if _, err := w.dyn.Resource(o.Resource).Namespace(o.GetNamespace()).Create(ctx, o.Unstructured, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return util.PollSlowly(ctx, time.Minute, "ClusterQueue "+ns+" active", func(ctx context.Context) (bool, error) {
		cq, err := w.dyn.Resource(kueue.ClusterQueues).Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return kueue.ConditionStatus(cq, "Active") == "True", nil
	})
}

// job queues a Job of 1-3 pods of 100m-300m CPU that run for 0-15 s (0:
// they complete at once, the case in which Kueue once found bookings that
// never ended), waits until it completes, and deletes it. Kueue makes,
// and gantry-provisioner serves, its ProvisioningRequest; Kueue deletes
// the request with the Job's Workload.
func (t *tenant) job(ctx context.Context) (string, error) {
	name := fmt.Sprintf("%s-j%d", t.name, t.n)
	pods := int32(1 + t.rng.IntN(3))
	cpu := resource.MustParse(fmt.Sprintf("%dm", 100*(1+t.rng.IntN(3))))
	runFor := time.Duration(t.rng.IntN(4)) * 5 * time.Second
	spec := v1.PodSpec{
		RestartPolicy: v1.RestartPolicyNever,
		SchedulerName: wrappers.DefaultSchedulerName,
		Containers: []v1.Container{{Name: "work", Image: wrappers.PauseImage, Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: cpu, v1.ResourceMemory: resource.MustParse("64Mi")},
		}}},
	}
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.jobs, Labels: map[string]string{kueue.QueueNameLabel: jobQueue}},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(pods), Completions: ptr.To(pods),
			// A pod on a node the run deletes fails; the Job replaces it.
			BackoffLimit: ptr.To[int32](6),
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{opLabel: "job"}},
				Spec:       spec,
			},
		},
	}
	if runFor > 0 {
		j.Spec.Template.Annotations = map[string]string{annotationRunFor: runFor.String()}
	}
	jobs := framework.TestContext.Client.BatchV1().Jobs(t.jobs)
	// Kueue's webhooks refuse Jobs while it restarts, as on any cluster:
	// the tenant retries, as a client would.
	var last error
	err := util.PollSlowly(ctx, kueueDown, "Job "+t.jobs+"/"+name+" created", func(ctx context.Context) (bool, error) {
		_, last = jobs.Create(ctx, j, metav1.CreateOptions{})
		switch {
		case last == nil || apierrors.IsAlreadyExists(last): // created, maybe by a try whose answer was lost
			return true, nil
		case isUnavailable(last) || strings.Contains(last.Error(), "failed calling webhook"):
			return false, nil
		default:
			return false, last
		}
	})
	if err != nil {
		if last != nil {
			err = last
		}
		return "", fmt.Errorf("creating Job %s/%s: %w", t.jobs, name, err)
	}
	defer func() {
		_ = jobs.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	}()
	var failed string
	err = util.PollSlowly(ctx, jobTimeout, "Job "+t.jobs+"/"+name+" complete", func(ctx context.Context) (bool, error) {
		got, err := jobs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Status != v1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				return true, nil
			case batchv1.JobFailed:
				failed = c.Reason + ": " + c.Message
				return true, nil
			}
		}
		return false, nil
	})
	switch {
	case ctx.Err() != nil:
		return "", ctx.Err()
	case err != nil:
		return resultUnplaced, nil
	case failed != "":
		return "", fmt.Errorf("the Job %s/%s failed: %s", t.jobs, name, failed)
	}
	return resultDone, nil
}

// cleanupJobs deletes a tenant's Jobs, with their pods; Kueue deletes
// their Workloads and requests.
func cleanupJobs(ctx context.Context, t *tenant) error {
	return framework.TestContext.Client.BatchV1().Jobs(t.jobs).DeleteCollection(ctx,
		metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}, metav1.ListOptions{})
}
