//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
)

// forge sets annotations of a request as its tenant may (a metadata
// update; "" removes one).
func (e *env) forge(ns, name string, set map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pr.Annotations == nil {
			pr.Annotations = map[string]string{}
		}
		for k, v := range set {
			if v == "" {
				delete(pr.Annotations, k)
			} else {
				pr.Annotations[k] = v
			}
		}
		_, err = e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Update(ctx, pr, metav1.UpdateOptions{})
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
}

// TestForgedAttemptKeepsOtherTenantsNodes: request r2, in another
// namespace, records request r1's scale-up attempt in the annotations
// earlier provisioners kept it in, with a plan and a start long past, and
// is deleted. r1's nodes survive and r1's attempt goes on.
func TestForgedAttemptKeepsOtherTenantsNodes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.StartScheduler(schedtest.GantryProfile)
	// No kubelet: r1's nodes never come up, its attempt stays in flight.
	e.startProvisioner(e.withNodeGroups)
	e.class("atomic-pool", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}, ProvisioningTimeout: seconds(time.Hour)})
	e.class("atomic-stuck", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"stuck"}, ProvisioningTimeout: seconds(time.Hour)})
	e.template("default", "workers", "2")
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.template("tenant-b", "workers", "2")

	e.request("default", "r1", "atomic-pool", "workers", 4, nil)
	e.waitCondition("default", "r1", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonScalingUp, util.Timeout)
	victims := e.groupNodes("pool")
	if len(victims) != 2 {
		t.Fatalf("%d nodes created for r1, want 2", len(victims))
	}
	attempt := victims[0].Labels[nodegroups.LabelAttempt]
	if want := e.uid("default", "r1") + "-1"; attempt != want {
		t.Fatalf("r1's nodes are of attempt %q, want %q", attempt, want)
	}

	e.request("tenant-b", "r2", "atomic-stuck", "workers", 2, nil)
	e.waitCondition("tenant-b", "r2", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonScalingUp, util.Timeout)
	e.forge("tenant-b", "r2", map[string]string{
		provisioning.AnnotationScaleUpAttempt: attempt,
		provisioning.AnnotationScaleUpPlan:    "pool=1000",
		provisioning.AnnotationScaleUpStarted: "2000-01-01T00:00:00Z",
	})
	// Reconciles of the edited request (an abort as timed out, before the
	// fix), then its deletion (a rollback).
	time.Sleep(2 * time.Second)
	e.deleteRequest("tenant-b", "r2")
	time.Sleep(time.Second)

	after := e.groupNodes("pool")
	uids := map[types.UID]bool{}
	for _, n := range after {
		uids[n.UID] = true
	}
	for _, n := range victims {
		if !uids[n.UID] {
			t.Errorf("node %s of r1's attempt %s was deleted on request r2's behalf", n.Name, attempt)
		}
	}
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "r1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionProvisioned); c == nil || c.Reason != provisioning.ReasonScalingUp {
		t.Errorf("r1's attempt was disturbed: %s", util.DescribeProvisioningRequest(pr))
	}
	if got := string(pr.Status.ProvisioningClassDetails[provisioning.DetailScaleUpAttempt]); got != attempt {
		t.Errorf("r1's recorded attempt is %q, want %q", got, attempt)
	}
	if got := e.groupNodes("stuck"); len(got) != 0 {
		t.Errorf("%d nodes of r2's own attempt left behind", len(got))
	}
}

// TestEditedBookkeepingKeepsBackoff: a tenant that removes the next-attempt
// annotation and records a scale-up attempt of its own request's UID in the
// annotations does not get a new attempt before the backoff is over.
func TestEditedBookkeepingKeepsBackoff(t *testing.T) {
	e := newEnv(t)
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner(e.withNodeGroups)
	// Every attempt fails at once, and the next is an hour later.
	e.class("atomic-backoff", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"},
		Backoff: &autoscalingv1alpha1.Backoff{Initial: seconds(time.Hour), Max: seconds(time.Hour)}})
	e.template("default", "huge", "3")
	// 30 three-CPU pods on at most 20 four-CPU nodes: not enough nodes now.
	e.request("default", "greedy", "atomic-backoff", "huge", 30, nil)
	first := e.waitCondition("default", "greedy", provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound, util.Timeout)
	uid := e.uid("default", "greedy")
	for i := range 3 {
		e.forge("default", "greedy", map[string]string{
			provisioning.AnnotationNextAttempt:    "",
			provisioning.AnnotationAttempts:       "0",
			provisioning.AnnotationScaleUpAttempt: fmt.Sprintf("%s-%d", uid, 7+i),
			provisioning.AnnotationScaleUpPlan:    "pool=1",
			provisioning.AnnotationScaleUpStarted: "2000-01-01T00:00:00Z",
		})
		time.Sleep(time.Second)
	}
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(context.Background(), "greedy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pr.Status.ProvisioningClassDetails[provisioning.DetailAttempts]; got != "1" {
		t.Errorf("%q failed attempts after the tenant's edits, want 1 (the backoff is an hour): %s", got, util.DescribeProvisioningRequest(pr))
	}
	// A new attempt (or an abort of a forged one) rewrites the message.
	if c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionProvisioned); c == nil || c.Message != first.Message {
		t.Errorf("the request was retried before its backoff was over: %s", util.DescribeProvisioningRequest(pr))
	}
	if got := pr.Status.ProvisioningClassDetails[provisioning.DetailNextAttempt]; got == "" {
		t.Error("the backoff's end is not recorded in the request's status")
	}
}
