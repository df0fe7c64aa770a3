//go:build integration

package framework

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestStartWithCRDs: Gantry's kube-apiserver (not a stock one) runs with
// the extra flags, serves Gantry's CRDs, authenticates the admin, lets it
// impersonate, and logs to the scratch directory.
func TestStartWithCRDs(t *testing.T) {
	cp := StartWithCRDs(t, "--feature-gates=AllAlpha=false", "--enable-priority-and-fairness=false")
	ctx := context.Background()

	info, err := cp.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info.GitVersion, "gantry") {
		t.Errorf("kube-apiserver version %q: want Gantry's build from _output/bin", info.GitVersion)
	}
	if _, err := cp.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing Reservations: %v", err)
	}
	if _, err := cp.Gantry.AutoscalingXV1().ProvisioningRequests("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing ProvisioningRequests: %v", err)
	}

	review, err := cp.Client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if groups := review.Status.UserInfo.Groups; !slices.Contains(groups, "system:masters") {
		t.Errorf("admin in groups %v, want system:masters", groups)
	}
	imp := rest.CopyConfig(cp.Config)
	imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:x:y", Groups: []string{"system:authenticated"}}
	review, err = kubernetes.NewForConfigOrDie(imp).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Username; got != "system:serviceaccount:x:y" {
		t.Errorf("impersonated user %q", got)
	}

	for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
		if st, err := os.Stat(filepath.Join(cp.Dir(), name)); err != nil || st.Size() == 0 {
			t.Errorf("log %s: %v, %v", name, st, err)
		}
	}
}
