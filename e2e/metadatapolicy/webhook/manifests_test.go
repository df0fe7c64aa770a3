package webhook

import (
	"bytes"
	"os/exec"
	"path/filepath"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/e2e/framework"
)

var _ = framework.Describe("gantry-webhook manifests", ginkgo.Label(framework.LabelMetadataPolicy, framework.LabelWebhook), func() {
	ginkgo.It("render with kustomize and pass server-side validation", func(ctx ginkgo.SpecContext) {
		tc := framework.TestContext
		kubectl := filepath.Join(tc.Root, "_output", "bin", "kubectl")
		rendered, err := exec.CommandContext(ctx, kubectl, "kustomize", filepath.Join(tc.Root, "admission", "config")).Output()
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "kubectl kustomize admission/config")

		// Namespaced objects need their namespace to exist for a dry run;
		// on a kind cluster it does (gantry-provisioner runs there) and is
		// left as it is.
		_, err = tc.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gantry-system"}}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) error {
				return tc.Client.CoreV1().Namespaces().Delete(ctx, "gantry-system", metav1.DeleteOptions{})
			})
		}
		apply := exec.CommandContext(ctx, kubectl, "--kubeconfig", tc.Kubeconfig, "apply", "--dry-run=server", "-f", "-")
		apply.Stdin = bytes.NewReader(rendered)
		out, err := apply.CombinedOutput()
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "server-side dry run of the manifests:\n%s", out)
		for _, kind := range []string{"serviceaccount/gantry-webhook", "clusterrole.rbac.authorization.k8s.io/gantry-webhook",
			"role.rbac.authorization.k8s.io/gantry-webhook", "rolebinding.rbac.authorization.k8s.io/gantry-webhook",
			"clusterrole.rbac.authorization.k8s.io/gantry-webhook-metrics-reader",
			"deployment.apps/gantry-webhook", "service/gantry-webhook", "poddisruptionbudget.policy/gantry-webhook",
			"mutatingwebhookconfiguration.admissionregistration.k8s.io/gantry-webhook",
			"validatingwebhookconfiguration.admissionregistration.k8s.io/gantry-webhook"} {
			gomega.Expect(string(out)).To(gomega.ContainSubstring(kind), "dry run did not report %s", kind)
		}
	})
})
