package framework

import (
	"context"
	"fmt"
	"strings"

	"github.com/onsi/ginkgo/v2"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/scheduler/profiles"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// What the suites talk to, set by SetupSuite for the cluster's control
// plane (Context.ControlPlane). With Gantry's, kube-scheduler is Gantry's
// and schedules every pod. With the stock one (a managed cluster), Gantry's
// scheduler is the Deployment gantry-system/gantry-scheduler beside
// upstream's, and schedules the pods that name it: the wrappers' pods,
// pod templates and reservations name it.
var (
	// SchedulerComponent is the component name of Gantry's scheduler.
	SchedulerComponent = "kube-scheduler"
	// SchedulerName is the profile the specs' pods are scheduled by.
	SchedulerName = "default-scheduler"
	// schedulerLease is Gantry's scheduler's leader lease.
	schedulerLease = metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-scheduler"}
)

// secondScheduler is the Deployment of Gantry's scheduler beside a stock one.
var secondScheduler = metav1.ObjectMeta{Namespace: profiles.SecondSchedulerNamespace, Name: profiles.SecondSchedulerName}

// detectControlPlane tells whose kube-apiserver the cluster runs: Gantry's
// reports its release with a +gantry stamp. A stock apiserver is only
// testable with Gantry's add-ons installed as on a managed cluster
// (config/overlays/managed), whose scheduler the specs then use.
func detectControlPlane(ctx context.Context) (string, error) {
	v, err := TestContext.Client.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	if strings.Contains(v.GitVersion, "+gantry") {
		return cluster.ControlPlaneGantry, nil
	}
	_, err = TestContext.Client.AppsV1().Deployments(secondScheduler.Namespace).Get(ctx, secondScheduler.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("the cluster runs kube-apiserver %s, not Gantry's, and has no %s/%s: install config/overlays/managed first",
			v.GitVersion, secondScheduler.Namespace, secondScheduler.Name)
	}
	if err != nil {
		return "", err
	}
	return cluster.ControlPlaneStock, nil
}

// useControlPlane points the suites at the control plane's scheduler.
func useControlPlane(plane string) {
	TestContext.ControlPlane = plane
	if plane != cluster.ControlPlaneStock {
		return
	}
	SchedulerComponent = profiles.SecondSchedulerName
	SchedulerName = profiles.SecondSchedulerName
	schedulerLease = secondScheduler
	wrappers.DefaultSchedulerName = profiles.SecondSchedulerName
}

// RequireGantryAPIServer skips the spec on a cluster whose kube-apiserver
// is not Gantry's, saying what it needs of it.
func RequireGantryAPIServer(what string) {
	if TestContext.ControlPlane == cluster.ControlPlaneStock {
		ginkgo.Skip(fmt.Sprintf("the cluster runs upstream's kube-apiserver, as a managed cluster does: %s is part of Gantry's kube-apiserver", what))
	}
}
