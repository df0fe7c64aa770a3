//go:build integration

package integration

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
)

// TestWithoutProvisioningRequestCRD: a provisioner started where the
// ProvisioningRequest CRD is not installed keeps running and does what
// needs no request (scale-down removes a node it created that is no longer
// needed), and serves requests once the CRD is installed, without a
// restart. Before, scale-down failed on every pass (it lists the requests
// to skip attempts in flight), and the manager stopped once the
// controller's cache gave up syncing: a crash loop.
func TestWithoutProvisioningRequestCRD(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ext, err := apiextensionsclient.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd := "provisioningrequests." + provv1.GroupName
	if err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	util.Must(t).Until(ctx, util.Timeout, "the ProvisioningRequest CRD gone from discovery", func(context.Context) bool {
		_, err := e.Client.Discovery().ServerResourcesForGroupVersion(provv1.SchemeGroupVersion.String())
		return apierrors.IsNotFound(err)
	})
	// A node of an earlier scale-up of the pool group, unneeded now.
	left := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "pool-left", Labels: map[string]string{
		nodegroups.LabelNodeGroup: "pool", nodegroups.LabelAttempt: "gone-1"}}}
	if _, err := e.Client.CoreV1().Nodes().Create(ctx, left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startProvisioner(e.withNodeGroups)

	util.Must(t).Until(ctx, util.Timeout, "scale-down removed the unneeded node", func(ctx context.Context) bool {
		_, err := e.Client.CoreV1().Nodes().Get(ctx, left.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})

	if _, err := framework.InstallGantryCRDs(e.Config); err != nil {
		t.Fatal(err)
	}
	e.CreateNodes(2, "4")
	e.template("default", "workers", "1")
	e.request("default", "late", provv1.ClassCheckCapacity, "workers", 2, nil)
	e.waitCondition("default", "late", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonBooking, util.LongTimeout)
}
