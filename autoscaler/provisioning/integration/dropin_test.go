//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestAsClusterAutoscaler: what a cluster-autoscaler user or Kueue sees. A
// booking all of whose pods came ends BookingExpired, reason
// CapacityBookingConsumed; noRetry other than "true" or "false" is
// ignored, not a failure; requests naming another processor instance are
// left to it; a namespace quota filled by the request's own gated pods
// does not refuse it; a finished request is deleted after the TTL.
func TestAsClusterAutoscaler(t *testing.T) {
	e := newEnv(t)
	e.CreateNodes(2, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner(func(o *app.Options) { o.FinishedRequestTTL = 3 * time.Second })
	ctx := context.Background()
	e.template("default", "workers", "1")

	t.Run("every pod came: BookingExpired, CapacityBookingConsumed", func(t *testing.T) {
		e.t = t
		e.request("default", "used", provv1.ClassCheckCapacity, "workers", 2, nil)
		e.waitCondition("default", "used", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		uid := e.uid("default", "used")
		e.pod("used-0", "1", "used")
		time.Sleep(util.ConsistentDuration)
		if pr := e.get("default", "used"); meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionBookingExpired) != nil {
			t.Fatalf("BookingExpired with 1 of 2 pods come: %+v", pr.Status.Conditions)
		}
		e.pod("used-1", "1", "used")
		c := e.waitCondition("default", "used", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonCapacityBookingConsumed, util.Timeout)
		t.Logf("BookingExpired: %s", c.Message)
		util.Must(t).Until(ctx, util.Timeout, "consumed booking released", func(context.Context) bool { return len(e.bookings(uid)) == 0 })
		for _, p := range []string{"used-0", "used-1"} {
			if e.nodeOf(p) == "" {
				t.Errorf("pod %s unscheduled after its booking was released", p)
			}
		}
		// Finished: deleted 3 s later (--delete-finished-requests-after).
		util.Must(t).Until(ctx, util.Timeout, "finished request deleted", func(ctx context.Context) bool {
			_, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "used", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		e.deletePods("used-0", "used-1")
	})

	// Short batch pods: each finishes as soon as it is bound, before the
	// scheduler's status controller may see it running, so the
	// Reservations need not record them as owners. The request still ends
	// when both came, and its booking is released.
	t.Run("every pod came and finished at once: BookingExpired, CapacityBookingConsumed", func(t *testing.T) {
		e.t = t
		e.request("default", "brief", provv1.ClassCheckCapacity, "workers", 2, nil)
		e.waitCondition("default", "brief", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		uid := e.uid("default", "brief")
		for _, name := range []string{"brief-0", "brief-1"} {
			e.pod(name, "1", "brief")
			e.finishOnceBound(name)
		}
		c := e.waitCondition("default", "brief", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonCapacityBookingConsumed, util.Timeout)
		t.Logf("BookingExpired: %s", c.Message)
		util.Must(t).Until(ctx, util.Timeout, "consumed booking released", func(context.Context) bool { return len(e.bookings(uid)) == 0 })
		e.deletePods("brief-0", "brief-1")
	})

	t.Run("noRetry True is ignored, as cluster-autoscaler ignores it", func(t *testing.T) {
		e.t = t
		e.request("default", "shouty", provv1.ClassCheckCapacity, "workers", 20, map[string]provv1.Parameter{provv1.ParameterNoRetry: "True"})
		e.waitCondition("default", "shouty", provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound, util.Timeout)
		pr := e.get("default", "shouty")
		if c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionAccepted); c == nil || !strings.Contains(c.Message, "noRetry ignored") {
			t.Errorf("Accepted does not say noRetry was ignored: %+v", c)
		}
		if meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionFailed) {
			t.Errorf("Failed with noRetry %q: %+v", "True", pr.Status.Conditions)
		}
		e.deleteRequest("default", "shouty")
	})

	t.Run("a request for another processor instance is left to it", func(t *testing.T) {
		e.t = t
		e.request("default", "elsewhere", provv1.ClassCheckCapacity, "workers", 1, map[string]provv1.Parameter{provisioning.ParameterProcessorInstance: "batch"})
		time.Sleep(util.ConsistentDuration)
		if pr := e.get("default", "elsewhere"); len(pr.Status.Conditions) != 0 || len(pr.Finalizers) != 0 {
			t.Errorf("a request for processor instance batch was touched: %+v, finalizers %v", pr.Status.Conditions, pr.Finalizers)
		}
	})

	t.Run("the request's gated pods are not counted twice against the quota", func(t *testing.T) {
		e.t = t
		q := e.namespaceWithQuota("queued", "3")
		e.template("queued", "workers", "1")
		// Created up front and gated, as Kueue's pod integration does; the
		// quota counts them at once.
		for _, name := range []string{"job-0", "job-1", "job-2"} {
			p := wrappers.MakePod(name, "queued").Requests("cpu", "1").Gated("kueue.x-k8s.io/admission").
				Annotation(provv1.AnnotationConsume, "job").Obj()
			util.Must(t).Until(ctx, util.Timeout, "gated pod "+name+" admitted by the quota", func(ctx context.Context) bool {
				_, err := e.Client.CoreV1().Pods("queued").Create(ctx, p, metav1.CreateOptions{})
				return err == nil || apierrors.IsAlreadyExists(err)
			})
		}
		e.quotaUsed(q, "3") // the three pods counted
		e.request("queued", "job", provv1.ClassCheckCapacity, "workers", 3, nil)
		c := e.waitCondition("queued", "job", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		t.Logf("Provisioned with the quota full of its own pods: %s", c.Message)
		// One more than its pods: refused, and the message says why.
		e.request("queued", "more", provv1.ClassCheckCapacity, "workers", 1, nil)
		e.expectFailed("queued", "more", provisioning.ReasonQuotaExceeded, "requests.cpu requested 1, used 3", "what was exceeded")
	})

	t.Run("a Kueue pod group's gated pods, tied to the request by its Workload, are not counted twice", func(t *testing.T) {
		e.t = t
		if err := framework.InstallCRDsAt(e.Config, wrappers.KueueWorkloadCRD()); err != nil {
			t.Fatal(err)
		}
		q := e.namespaceWithQuota("team", "2")
		// The pods of the group, gated, without the consume annotation:
		// Kueue adds it only when it admits the workload.
		var pods []*v1.Pod
		for _, name := range []string{"group-0", "group-1"} {
			p := wrappers.MakePod(name, "team").Requests("cpu", "1").Gated(wrappers.KueueAdmissionGate).
				Label(wrappers.KueuePodGroupLabel, "group").Obj()
			p, err := e.Client.CoreV1().Pods("team").Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p)
		}
		e.quotaUsed(q, "2")
		dyn := dynamic.NewForConfigOrDie(e.Config)
		workloads := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta1", Resource: "workloads"}).Namespace("team")
		w, err := workloads.Create(ctx, wrappers.MakeKueueWorkload("group", "team", pods...), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		name := wrappers.KueueRequestName("group", "provision", 1)
		tmpl := wrappers.MakePodTemplate(wrappers.KueuePodTemplateName(name, "main"), "team").Requests("cpu", "1").OwnedByWorkload(w).Obj()
		if _, err := e.Client.CoreV1().PodTemplates("team").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pr := wrappers.MakeProvisioningRequest(name, "team", provv1.ClassCheckCapacity).PodSet(tmpl.Name, 2).OwnedByWorkload(w).Obj()
		if _, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("team").Create(ctx, pr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c := e.waitCondition("team", name, provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		t.Logf("Provisioned with the quota full of its workload's gated pods: %s", c.Message)
		// The same request without the Workload: its pods are not its.
		e.request("team", "unowned", provv1.ClassCheckCapacity, tmpl.Name, 2, nil)
		e.expectFailed("team", "unowned", provisioning.ReasonQuotaExceeded, "requests.cpu requested 2, used 2", "what was exceeded")
	})
}

// TestLostBookingIsBookedAgain: a booked node that goes away is booked
// again on another node, and the request stays Provisioned; once there is
// no room anywhere, a loss is CapacityRevoked.
func TestLostBookingIsBookedAgain(t *testing.T) {
	e := newEnv(t)
	e.CreateNodes(3, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner()
	ctx := context.Background()
	e.template("default", "workers", "3")

	e.request("default", "job", provv1.ClassCheckCapacity, "workers", 2, nil)
	e.waitCondition("default", "job", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
	uid := e.uid("default", "job")
	first := e.bookings(uid)
	lost := first[0].Status.NodeName
	if err := e.Client.CoreV1().Nodes().Delete(ctx, lost, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted node %s, which held reservation %s", lost, first[0].Name)
	util.Must(t).Until(ctx, util.Timeout, "the lost pod booked again elsewhere", func(context.Context) bool {
		rs := e.bookings(uid)
		if placedPods(rs) != 2 || len(rs) != 2 {
			return false
		}
		for _, r := range rs {
			if r.Status.NodeName == lost || r.Status.Phase != schedv1alpha1.ReservationAvailable {
				return false
			}
		}
		return true
	})
	pr := e.get("default", "job")
	if !meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned) ||
		meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionCapacityRevoked) != nil {
		t.Errorf("after a booking was made again: %+v", pr.Status.Conditions)
	}
	if got := pr.Status.ProvisioningClassDetails[provisioning.DetailRebooks]; got != "1" {
		t.Errorf("detail %s = %q, want 1", provisioning.DetailRebooks, got)
	}

	// Two nodes left, each with one 3-CPU booking: deleting one leaves no
	// node with 3 CPUs free.
	gone := e.bookings(uid)[0].Status.NodeName
	if err := e.Client.CoreV1().Nodes().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c := e.waitCondition("default", "job", provv1.ConditionCapacityRevoked, metav1.ConditionTrue, provisioning.ReasonCapacityRevoked, util.Timeout)
	t.Logf("CapacityRevoked: %s", c.Message)
	util.Must(t).Until(ctx, util.Timeout, "revoked booking released", func(context.Context) bool { return len(e.bookings(uid)) == 0 })
}

func (e *env) get(ns, name string) *provv1.ProvisioningRequest {
	e.t.Helper()
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pr
}

// TestResourceClaims: pods that claim devices are simulated with the
// DynamicResources plugin: a request fits as many pods as there are free
// devices, on the nodes that have them, and no more.
func TestResourceClaims(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	const driver = "gpu.example.com"
	nodeName := "node-1"
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}}}
	if _, err := e.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-gpus"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: driver, NodeName: &nodeName, Pool: resourcev1.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-0"}, {Name: "gpu-1"}}}}
	if _, err := e.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rct := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "one-gpu"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu"}}}}}}}
	if _, err := e.Client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, rct, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pt := wrappers.MakePodTemplate("trainers", "default").Requests("cpu", "100m").Obj()
	pt.Template.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}
	pt.Template.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	if _, err := e.Client.CoreV1().PodTemplates("default").Create(ctx, pt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e.request("default", "two", provv1.ClassCheckCapacity, "trainers", 2, nil)
	c := e.waitCondition("default", "two", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
	t.Logf("2 pods of one GPU each, 2 GPUs on %s: %s", nodeName, c.Message)
	for _, r := range e.bookings(e.uid("default", "two")) {
		if r.Spec.Template.NodeName != nodeName {
			t.Errorf("reservation %s booked on %s, which has no GPU", r.Name, r.Spec.Template.NodeName)
		}
	}
	e.request("default", "three", provv1.ClassCheckCapacity, "trainers", 3, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
	e.expectFailed("default", "three", provv1.ReasonCapacityIsNotFound, "cannot allocate all claims", "that the devices ran out")

	// A template that does not exist: no pod like it could run.
	bad := wrappers.MakePodTemplate("missing-claim", "default").Requests("cpu", "100m").Obj()
	bad.Template.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("no-such-template")}}
	if _, err := e.Client.CoreV1().PodTemplates("default").Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.request("default", "bad", provv1.ClassCheckCapacity, "missing-claim", 1, nil)
	e.expectFailed("default", "bad", provisioning.ReasonUnsupportedPods, "no-such-template", "which template is missing")
}
