package kueue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	kueueapi "github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

const (
	// localQueueName is the LocalQueue of the spec's namespace.
	localQueueName = "queue"
	// workloadPriorityLabel names a Job's WorkloadPriorityClass.
	workloadPriorityLabel = "kueue.x-k8s.io/priority-class"
	// requiredTopologyAnnotation names the topology level a Job's pods
	// must fit in.
	requiredTopologyAnnotation = "kueue.x-k8s.io/podset-required-topology"
	// holdGate is the scheduling gate of jobOptions.gate.
	holdGate = "e2e.gantry.dev/hold"
	// The annotations of Gantry's kwok stages (kind/config/kwok/stages.yaml).
	annotationRunFor           = "kwok.gantry.dev/run-for"
	annotationFailFirstAttempt = "kwok.gantry.dev/fail-first-attempt"
)

// env is what the specs act through.
type env struct {
	f   *framework.Framework
	dyn dynamic.Interface
}

func newEnv(f *framework.Framework) *env {
	return &env{f: f, dyn: dynamic.NewForConfigOrDie(framework.TestContext.Config)}
}

// create creates a Kueue object (cluster-scoped unless it has a namespace)
// and deletes it when the spec ends.
func (e *env) create(ctx context.Context, gvr schema.GroupVersionResource, obj map[string]any) {
	ginkgo.GinkgoHelper()
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(kueueapi.Resource("").GroupVersion().String())
	ri := e.dyn.Resource(gvr).Namespace(u.GetNamespace())
	_, err := ri.Create(ctx, u, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating %s %s", u.GetKind(), u.GetName())
	ginkgo.DeferCleanup(func(ctx context.Context) {
		err := ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			ginkgo.GinkgoWriter.Printf("deleting %s %s: %v\n", u.GetKind(), u.GetName(), err)
		}
	})
}

// queueOptions shape a ClusterQueue and its ProvisioningRequestConfig.
type queueOptions struct {
	// class is the ProvisioningClass of the requests.
	class string
	// cpu is the ClusterQueue's CPU quota.
	cpu string
	// parameters go into every request.
	parameters map[string]any
	// retry is the config's retryStrategy (nil: Kueue's default).
	retry map[string]any
	// podSetUpdates is the config's podSetUpdates (nil: none).
	podSetUpdates map[string]any
	// preemption is the ClusterQueue's preemption (nil: Kueue's default,
	// none).
	preemption map[string]any
	// topology names the Topology of the ResourceFlavor, which then covers
	// the nodes of nodeLabels: Kueue's topology-aware scheduling.
	topology   string
	nodeLabels map[string]string
}

// queue makes, for the spec's namespace, a ResourceFlavor, a
// ProvisioningRequestConfig, an AdmissionCheck of Kueue's provisioning
// controller, a ClusterQueue with that check, and the LocalQueue
// localQueueName, and waits until the ClusterQueue is active.
func (e *env) queue(ctx context.Context, o queueOptions) {
	ginkgo.GinkgoHelper()
	name := e.f.Namespace
	q := kueueapi.Queue{
		Name: name, Namespace: e.f.Namespace, LocalQueue: localQueueName, Class: o.class, CPU: o.cpu, Memory: "1Ti",
		Parameters: o.parameters, RetryStrategy: o.retry, PodSetUpdates: o.podSetUpdates, Preemption: o.preemption,
		Topology: o.topology, NodeLabels: o.nodeLabels,
	}
	for _, obj := range q.Objects() {
		e.create(ctx, obj.Resource, obj.Object)
	}
	framework.Eventually(ctx, func(g gomega.Gomega) {
		cq, err := e.dyn.Resource(kueueapi.ClusterQueues).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(kueueapi.ConditionStatus(cq, "Active")).To(gomega.Equal("True"), "ClusterQueue %s not active: %v", name, cq.Object["status"])
	}).Should(gomega.Succeed())
}

// topology creates a Topology of the node labels given, highest level
// first, for the spec, and returns its name.
func (e *env) topology(ctx context.Context, levels ...string) string {
	ginkgo.GinkgoHelper()
	var ls []any
	for _, l := range levels {
		ls = append(ls, map[string]any{"nodeLabel": l})
	}
	name := e.f.Namespace
	e.create(ctx, kueueapi.Topologies, map[string]any{"kind": "Topology", "metadata": map[string]any{"name": name}, "spec": map[string]any{"levels": ls}})
	return name
}

// jobOptions shape a Job.
type jobOptions struct {
	pods     int32
	cpu      string
	priority string
	// nodeGroup puts the pods on a node group of the provisioner's.
	nodeGroup string
	// tolerate are taint keys the pods tolerate.
	tolerate []string
	labels   map[string]string
	// runFor is how long each pod runs before it succeeds (kwok's stage
	// gantry-pod-run-for); zero: it completes at once.
	runFor time.Duration
	// workloadPriority names the Job's WorkloadPriorityClass.
	workloadPriority string
	// gate holds the Job's pods back from the scheduler: a scheduling gate
	// nobody removes.
	gate bool
	// failFirstAttempt makes the Job Indexed with a backoff limit of one
	// per index, and fails the first pod of every index (kwok's stage
	// gantry-pod-fail-first-attempt): the Job controller replaces each.
	failFirstAttempt bool
	// requiredTopology is the topology level (a node label) that Kueue's
	// topology-aware scheduling must fit all the Job's pods in.
	requiredTopology string
}

// job creates a Job in the suite's LocalQueue: Kueue's webhook suspends it
// until its workload is admitted. kwok completes a Job's pods about a
// second after they start, unless o says otherwise (kind/config/kwok/stages.yaml).
func (e *env) job(ctx context.Context, name string, o jobOptions) *batchv1.Job {
	ginkgo.GinkgoHelper()
	labels := map[string]string{kueueapi.QueueNameLabel: localQueueName}
	for k, v := range o.labels {
		labels[k] = v
	}
	spec := v1.PodSpec{
		RestartPolicy:     v1.RestartPolicyNever,
		PriorityClassName: o.priority,
		// Gantry's scheduler, the one that honours bookings (the second
		// scheduler on a stock control plane).
		SchedulerName: wrappers.DefaultSchedulerName,
		Containers: []v1.Container{{Name: "work", Image: wrappers.PauseImage, Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(o.cpu), v1.ResourceMemory: resource.MustParse("64Mi")},
		}}},
	}
	if o.nodeGroup != "" {
		spec.NodeSelector = map[string]string{nodegroups.LabelNodeGroup: o.nodeGroup}
	}
	if o.workloadPriority != "" {
		labels[workloadPriorityLabel] = o.workloadPriority
	}
	if o.gate {
		spec.SchedulingGates = []v1.PodSchedulingGate{{Name: holdGate}}
	}
	for _, key := range o.tolerate {
		spec.Tolerations = append(spec.Tolerations, v1.Toleration{Key: key, Operator: v1.TolerationOpExists})
	}
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.f.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(o.pods), Completions: ptr.To(o.pods), BackoffLimit: ptr.To[int32](3),
			Template: v1.PodTemplateSpec{Spec: spec},
		},
	}
	annotations := map[string]string{}
	if o.runFor > 0 {
		annotations[annotationRunFor] = o.runFor.String()
	}
	if o.requiredTopology != "" {
		annotations[requiredTopologyAnnotation] = o.requiredTopology
	}
	if o.failFirstAttempt {
		// The Job controller counts an index's failures in an annotation
		// of its pods only with a backoff limit per index.
		j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		j.Spec.BackoffLimit = nil
		j.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
		annotations[annotationFailFirstAttempt] = "true"
	}
	if len(annotations) > 0 {
		j.Spec.Template.Annotations = annotations
	}
	created, err := e.f.Client.BatchV1().Jobs(e.f.Namespace).Create(ctx, j, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(created.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()), "Kueue's webhook did not suspend Job %s", name)
	return created
}

// waitJobsComplete waits until every Job named has completed.
func (e *env) waitJobsComplete(ctx context.Context, names ...string) {
	ginkgo.GinkgoHelper()
	framework.Eventually(ctx, func(g gomega.Gomega) {
		for _, n := range names {
			j, err := e.f.Client.BatchV1().Jobs(e.f.Namespace).Get(ctx, n, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			complete := false
			for _, c := range j.Status.Conditions {
				complete = complete || c.Type == batchv1.JobComplete && c.Status == v1.ConditionTrue
			}
			g.Expect(complete).To(gomega.BeTrue(), "Job %s not complete: %+v; workload: %s", n, j.Status, e.workloadState(ctx, n))
		}
	}).Should(gomega.Succeed())
}

// workloadState describes the Workload of a Job, for failure messages.
func (e *env) workloadState(ctx context.Context, job string) string {
	list, err := e.dyn.Resource(kueueapi.Workloads).Namespace(e.f.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, w := range list.Items {
		if !ownedBy(&w, "Job", job) {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
		checks, _, _ := unstructured.NestedSlice(w.Object, "status", "admissionChecks")
		fmt.Fprintf(&b, "%s conditions %v checks %v", w.GetName(), conds, checks)
	}
	return b.String()
}

func ownedBy(obj *unstructured.Unstructured, kind, name string) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == kind && o.Name == name {
			return true
		}
	}
	return false
}

// requests are the spec's ProvisioningRequests (Kueue's, one per workload
// and attempt).
func (e *env) requests(ctx context.Context) []provv1.ProvisioningRequest {
	ginkgo.GinkgoHelper()
	list, err := e.f.Gantry.AutoscalingXV1().ProvisioningRequests(e.f.Namespace).List(ctx, metav1.ListOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return list.Items
}

// reservations are the bookings of the spec's requests.
func (e *env) reservations(ctx context.Context) []schedv1alpha1.Reservation {
	ginkgo.GinkgoHelper()
	list, err := e.f.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var out []schedv1alpha1.Reservation
	for _, r := range list.Items {
		if e.books(&r) {
			out = append(out, r)
		}
	}
	return out
}

// books reports whether r is the booking of one of the spec's requests.
func (e *env) books(r *schedv1alpha1.Reservation) bool {
	return strings.HasPrefix(r.Annotations[provisioning.AnnotationRequest], e.f.Namespace+"/")
}

// expectBookingsEnded waits until every request of the spec has ended as
// Kueue understands it (BookingExpired or Failed) with the reason given for
// BookingExpired, and none holds a Reservation.
func (e *env) expectBookingsEnded(ctx context.Context, want int, reason string) {
	ginkgo.GinkgoHelper()
	start := time.Now()
	framework.Eventually(ctx, func(g gomega.Gomega) {
		prs := e.requests(ctx)
		g.Expect(prs).To(gomega.HaveLen(want), "requests of the spec")
		for _, pr := range prs {
			c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionBookingExpired)
			g.Expect(c).NotTo(gomega.BeNil(), "request %s has not ended: %v", pr.Name, pr.Status.Conditions)
			g.Expect(c.Status).To(gomega.Equal(metav1.ConditionTrue), "request %s", pr.Name)
			g.Expect(c.Reason).To(gomega.Equal(reason), "request %s: %s", pr.Name, c.Message)
		}
		g.Expect(e.reservations(ctx)).To(gomega.BeEmpty(), "Reservations left")
	}).Should(gomega.Succeed())
	ginkgo.GinkgoWriter.Printf("%d requests ended %s, no Reservation left, %s after the Jobs completed\n", want, reason, time.Since(start).Round(time.Millisecond))
}

// leaveNothing registers the end-of-spec check that the spec's Jobs,
// requests, Reservations and provisioned nodes are gone once its Jobs are.
func (e *env) leaveNothing() {
	ginkgo.DeferCleanup(func(ctx context.Context) {
		bg := metav1.DeletePropagationBackground
		gomega.Expect(e.f.Client.BatchV1().Jobs(e.f.Namespace).DeleteCollection(ctx,
			metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})).To(gomega.Succeed())
		start := time.Now()
		framework.Eventually(ctx, func(g gomega.Gomega) {
			g.Expect(e.requests(ctx)).To(gomega.BeEmpty(), "requests left after their Jobs were deleted")
			g.Expect(e.reservations(ctx)).To(gomega.BeEmpty(), "Reservations left after their Jobs were deleted")
			nodes, err := e.f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(nodes.Items).To(gomega.BeEmpty(), "nodes the provisioner made are still there")
		}).Should(gomega.Succeed())
		ginkgo.GinkgoWriter.Printf("requests, Reservations and the provisioner's nodes gone %s after the Jobs were deleted\n", time.Since(start).Round(time.Millisecond))
	})
}

// workloadPriorityClass creates a WorkloadPriorityClass of value for the
// spec and returns its name.
func (e *env) workloadPriorityClass(ctx context.Context, suffix string, value int64) string {
	ginkgo.GinkgoHelper()
	name := e.f.Namespace + "-" + suffix
	e.create(ctx, kueueapi.WorkloadPriorityClasses, map[string]any{"kind": "WorkloadPriorityClass", "metadata": map[string]any{"name": name}, "value": value})
	return name
}

// workloadOf is the Workload of a Job.
func (e *env) workloadOf(ctx context.Context, job string) *unstructured.Unstructured {
	ginkgo.GinkgoHelper()
	list, err := e.dyn.Resource(kueueapi.Workloads).Namespace(e.f.Namespace).List(ctx, metav1.ListOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	for i := range list.Items {
		if ownedBy(&list.Items[i], "Job", job) {
			return &list.Items[i]
		}
	}
	return nil
}

// expectBookedAt creates a Job and checks that the Reservations of its
// booking hold capacity at priority, then that the Job completes and its
// booking ends. The Job's pods may end the booking within a second: the
// Reservations are read as they are created.
func (e *env) expectBookedAt(ctx context.Context, name string, o jobOptions, priority int32) {
	ginkgo.GinkgoHelper()
	w, err := e.f.Gantry.SchedulingV1alpha1().Reservations().Watch(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	defer w.Stop()
	e.job(ctx, name, o)
	gomega.Eventually(ctx, w.ResultChan()).WithTimeout(util.LongTimeout).Should(gomega.Receive(gomega.Satisfy(func(ev watch.Event) bool {
		r, ok := ev.Object.(*schedv1alpha1.Reservation)
		if !ok || ev.Type != watch.Added || !e.books(r) {
			return false
		}
		gomega.Expect(r.Spec.Template.Priority).To(gomega.HaveValue(gomega.Equal(priority)), "Reservation %s", r.Name)
		return true
	})))
	ginkgo.GinkgoWriter.Printf("Job %s booked at priority %d\n", name, priority)
	e.waitJobsComplete(ctx, name)
	e.expectBookingsEnded(ctx, 1, provisioning.ReasonCapacityBookingConsumed)
}

// nodesOf are the nodes of pods, one entry a pod.
func nodesOf(pods []v1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Spec.NodeName)
	}
	return out
}
