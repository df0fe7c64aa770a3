//go:build integration

package integration

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/internal/apply"
	"github.com/gantry-dev/gantry/internal/kustomize"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestAdmissionPoliciesConfineIdentities: what RBAC cannot say, the shipped
// ValidatingAdmissionPolicies do. gantry-webhook may create only its
// certificate Secret (RBAC's resourceNames cannot limit create), and
// gantry-provisioner may create pods as dry runs only (it dry-runs a
// booking's pods through the namespace's admission). The managed overlay's
// identities, roles and policies are applied for real; each identity is
// then impersonated.
func TestAdmissionPoliciesConfineIdentities(t *testing.T) {
	cp := framework.Start(t)
	root := framework.Root(t)
	ctx := context.Background()
	objs, err := kustomize.Build(withComponents(t, root, "config/overlays/managed", "autoscaler/config/components/kwok"))
	if err != nil {
		t.Fatal(err)
	}
	keep := []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	var identities []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(keep, o.GetKind()) {
			identities = append(identities, o)
		}
	}
	a, err := apply.New(cp.Config, "gantry-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(ctx, identities, false); err != nil {
		t.Fatal(err)
	}
	as := func(sa string) kubernetes.Interface {
		cfg := rest.CopyConfig(cp.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:gantry-system:" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:gantry-system", "system:authenticated"}}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	webhook, provisioner := as("gantry-webhook"), as("gantry-provisioner")
	secret := func(name string, typ v1.SecretType) *v1.Secret {
		return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gantry-system"}, Type: typ,
			Data: map[string][]byte{v1.TLSCertKey: []byte("cert"), v1.TLSPrivateKeyKey: []byte("key")}}
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// A policy takes effect once kube-apiserver has compiled it: wait
	// until a dry run of a forbidden Secret is refused (both policies came
	// in the same apply).
	util.Must(t).Until(ctx, util.Timeout, "the admission policies in effect", func(context.Context) bool {
		_, err := webhook.CoreV1().Secrets("gantry-system").Create(ctx, secret("probe", v1.SecretTypeTLS), dryRun)
		return err != nil
	})
	for _, tc := range []struct {
		name string
		s    *v1.Secret
	}{
		{"another Secret", secret("stolen", v1.SecretTypeTLS)},
		{"the certificate Secret of another type", secret("gantry-webhook-cert", v1.SecretTypeOpaque)},
	} {
		_, err := webhook.CoreV1().Secrets("gantry-system").Create(ctx, tc.s, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "gantry-webhook may create only the Secret gantry-webhook-cert, of type kubernetes.io/tls") {
			t.Errorf("gantry-webhook creating %s: %v, want refused by gantry-webhook-secret-create", tc.name, err)
		}
	}
	if _, err := webhook.CoreV1().Secrets("gantry-system").Create(ctx, secret("gantry-webhook-cert", v1.SecretTypeTLS), dryRun); err != nil {
		t.Errorf("gantry-webhook creating its certificate Secret: %v", err)
	}
	other := secret("gantry-webhook-cert", v1.SecretTypeTLS)
	other.Namespace = "default"
	if _, err := webhook.CoreV1().Secrets("default").Create(ctx, other, dryRun); err == nil {
		t.Error("gantry-webhook created a Secret outside gantry-system")
	}

	pod := wrappers.MakePod("real", "default").Requests("cpu", "1").Obj()
	_, err = provisioner.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "gantry-provisioner may create pods as dry runs only") {
		t.Errorf("gantry-provisioner creating a pod: %v, want refused by gantry-provisioner-dry-run-pods", err)
	}
	if _, err := provisioner.CoreV1().Pods("default").Create(ctx, pod, dryRun); err != nil {
		t.Errorf("gantry-provisioner's dry run: %v", err)
	}
}
