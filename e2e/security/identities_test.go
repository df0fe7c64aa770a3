package security

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/internal/kustomize"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// What the shipped identities are refused, as the ValidatingAdmissionPolicies
// of admission/config and autoscaler/config word it.
const (
	webhookSecretRefusal   = "gantry-webhook may create only the Secret gantry-webhook-cert, of type kubernetes.io/tls"
	provisionerPodsRefusal = "gantry-provisioner may create pods as dry runs only"
)

// Second review, N11: gantry-webhook could create any Secret in its
// namespace, and the Cluster API provider's rights were cluster-wide. The
// tenant here holds the token of each of Gantry's own identities (as one
// that broke into a component's pod would) and turns it on a neighbour.
var _ = framework.Describe("Gantry's own identities", ginkgo.Label(framework.LabelSecurity), ginkgo.Serial, func() {
	victim := framework.NewFramework("security-identities")

	ginkgo.It("hold the rights they ship with and no more: their tokens reach no neighbour's Secrets or pods", func(ctx ginkgo.SpecContext) {
		ginkgo.By("installing the managed overlay's identities, roles and admission policies (those the cluster lacks)")
		shipped := shippedIdentities(ctx)

		ginkgo.By("giving the neighbour a Secret and a pod")
		secret, err := victim.Client.CoreV1().Secrets(victim.Namespace).Create(ctx, &v1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "credentials"}, StringData: map[string]string{"password": "s3cret"},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		pod, err := victim.Client.CoreV1().Pods(victim.Namespace).Create(ctx,
			wrappers.MakePod("app", victim.Namespace).Requests("cpu", "100m").Gated("example.com/wait").Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		systemSecrets := secretNames(ctx, "gantry-system")

		webhook := framework.ActAs(ctx, "gantry-system", "gantry-webhook")
		provisioner := framework.ActAs(ctx, "gantry-system", "gantry-provisioner")
		scheduler := framework.ActAs(ctx, "gantry-system", "gantry-scheduler")
		dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		tlsSecret := func(name string) *v1.Secret {
			return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: v1.SecretTypeTLS,
				Data: map[string][]byte{v1.TLSCertKey: []byte("cert"), v1.TLSPrivateKeyKey: []byte("key")}}
		}

		ginkgo.By("creating, with gantry-webhook's token, a Secret of another name in gantry-system")
		// RBAC and the policies reach kube-apiserver through informers:
		// wait until a dry run is refused by the policy, not by RBAC.
		framework.Eventually(ctx, func() string {
			_, err := webhook.Client.CoreV1().Secrets("gantry-system").Create(ctx, tlsSecret("probe"), dryRun)
			return errText(err)
		}).Should(gomega.ContainSubstring(webhookSecretRefusal))
		_, err = webhook.Client.CoreV1().Secrets("gantry-system").Create(ctx, tlsSecret("stolen"), metav1.CreateOptions{})
		gomega.Expect(errText(err)).To(gomega.ContainSubstring(webhookSecretRefusal))
		// The right exists, for its own certificate (which an install made
		// already, on a managed cluster).
		_, err = webhook.Client.CoreV1().Secrets("gantry-system").Create(ctx, tlsSecret("gantry-webhook-cert"), dryRun)
		if !apierrors.IsAlreadyExists(err) {
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "gantry-webhook creating its own certificate Secret (dry run)")
		}

		ginkgo.By("turning gantry-webhook's token on the neighbour's Secrets and on another webhook configuration")
		_, err = webhook.Client.CoreV1().Secrets(victim.Namespace).Get(ctx, secret.Name, metav1.GetOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "get: want Forbidden, got %v", err)
		_, err = webhook.Client.CoreV1().Secrets(victim.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "list: want Forbidden, got %v", err)
		_, err = webhook.Client.CoreV1().Secrets(victim.Namespace).Create(ctx, tlsSecret("planted"), metav1.CreateOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "create: want Forbidden, got %v", err)
		gomega.Expect(webhook.CanNamed(ctx, "update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "gantry-webhook")).To(gomega.BeTrue(), "its own configuration")
		gomega.Expect(webhook.CanNamed(ctx, "update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "another")).To(gomega.BeFalse(), "another configuration")

		ginkgo.By("creating, with gantry-provisioner's token, a pod in the neighbour's namespace")
		framework.Eventually(ctx, func() string {
			_, err := provisioner.Client.CoreV1().Pods(victim.Namespace).Create(ctx, wrappers.MakePod("probe", victim.Namespace).Obj(), metav1.CreateOptions{})
			return errText(err)
		}).Should(gomega.ContainSubstring(provisionerPodsRefusal))
		// Its dry runs, which a booking needs, pass.
		_, err = provisioner.Client.CoreV1().Pods(victim.Namespace).Create(ctx, wrappers.MakePod("dry", victim.Namespace).Obj(), dryRun)
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "gantry-provisioner's dry run")

		ginkgo.By("turning gantry-provisioner's token on the neighbour's pods and Secrets, and on Cluster API objects outside the node groups' namespace")
		err = provisioner.Client.CoreV1().Pods(victim.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "pod delete: want Forbidden, got %v", err)
		_, err = provisioner.Client.CoreV1().Secrets(victim.Namespace).Get(ctx, secret.Name, metav1.GetOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "Secret get: want Forbidden, got %v", err)
		for _, r := range []struct{ verb, resource string }{{"update", "machinedeployments"}, {"patch", "machines"}, {"list", "machinesets"}} {
			gomega.Expect(provisioner.Can(ctx, r.verb, "cluster.x-k8s.io", r.resource, "", metav1.NamespaceDefault)).To(gomega.BeTrue(),
				"%s %s in the node groups' namespace", r.verb, r.resource)
			gomega.Expect(provisioner.Can(ctx, r.verb, "cluster.x-k8s.io", r.resource, "", victim.Namespace)).To(gomega.BeFalse(),
				"%s %s in the neighbour's namespace", r.verb, r.resource)
		}
		// With the kwok node-group provider (a kind cluster's), the
		// provisioner plays the cloud and deletes Node objects through that
		// component's own binding; the Cluster API identities shipped still
		// grant no such right.
		gomega.Expect(grantsNodeDeletion(shipped, "gantry-provisioner")).To(gomega.BeEmpty(), "Cluster API deletes the nodes, not the provisioner")
		if _, err := framework.TestContext.Client.RbacV1().ClusterRoleBindings().Get(ctx, kwokNodeGroupsBinding, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			gomega.Expect(provisioner.Can(ctx, "delete", "", "nodes", "", "")).To(gomega.BeFalse(), "Cluster API deletes the nodes, not the provisioner")
		} else {
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			ginkgo.GinkgoWriter.Printf("the cluster's node groups are kwok's (ClusterRoleBinding %s): node deletion is that provider's right, not the shipped identities'\n", kwokNodeGroupsBinding)
		}

		ginkgo.By("turning gantry-scheduler's token on the neighbour's Secrets and on reservations")
		_, err = scheduler.Client.CoreV1().Secrets(victim.Namespace).Get(ctx, secret.Name, metav1.GetOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "Secret get: want Forbidden, got %v", err)
		gomega.Expect(scheduler.Can(ctx, "update", schedv1alpha1.GroupName, "reservations", "", "")).To(gomega.BeFalse(), "only a reservation's status")
		gomega.Expect(scheduler.Can(ctx, "create", schedv1alpha1.GroupName, "reservations", "", "")).To(gomega.BeFalse())

		ginkgo.By("checking the neighbour and gantry-system are unchanged")
		got, err := victim.Client.CoreV1().Secrets(victim.Namespace).Get(ctx, secret.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(got.ResourceVersion).To(gomega.Equal(secret.ResourceVersion))
		gotPod, err := victim.Client.CoreV1().Pods(victim.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(gotPod.UID).To(gomega.Equal(pod.UID))
		gomega.Expect(gotPod.DeletionTimestamp).To(gomega.BeNil())
		pods, err := victim.Client.CoreV1().Pods(victim.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(pods.Items).To(gomega.HaveLen(1), "pods in the neighbour's namespace")
		secrets, err := victim.Client.CoreV1().Secrets(victim.Namespace).List(ctx, metav1.ListOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(secrets.Items).To(gomega.HaveLen(1), "Secrets in the neighbour's namespace")
		gomega.Expect(secretNames(ctx, "gantry-system")).To(gomega.Equal(systemSecrets))
	})
})

// kwokNodeGroupsBinding binds gantry-provisioner to the rights of the kwok
// node-group provider (autoscaler/config/components/kwok).
const kwokNodeGroupsBinding = "gantry-provisioner-node-groups"

// shippedIdentities applies the ServiceAccounts, RBAC and admission
// policies of the managed overlay with the Cluster API provider (its
// MachineDeployments' namespace is default) that the cluster does not
// have yet, and deletes those again when the spec ends: on a managed
// cluster, what the install made stays as it was. It returns every object
// of those kinds the overlay ships, applied or not.
func shippedIdentities(ctx context.Context) []*unstructured.Unstructured {
	ginkgo.GinkgoHelper()
	root := framework.TestContext.Root
	dir := ginkgo.GinkgoT().TempDir()
	err := kustomize.WriteWithComponents(dir, filepath.Join(root, "config", "overlays", "managed"),
		filepath.Join(root, "autoscaler", "config", "components", "clusterapi"))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	objs, err := kustomize.Build(dir)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	kinds := []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	var identities []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			identities = append(identities, o)
		}
	}
	a, err := framework.NewApplier()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	missing, err := a.Missing(ctx, identities)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.GinkgoWriter.Printf("applying %d of the %d objects of the shipped identities\n", len(missing), len(identities))
	gomega.Expect(a.Apply(ctx, missing)).To(gomega.Succeed())
	ginkgo.DeferCleanup(func(ctx context.Context) error { return a.Delete(ctx, missing) })
	for _, sa := range []string{"gantry-webhook", "gantry-provisioner", "gantry-scheduler"} {
		framework.Eventually(ctx, func() error {
			_, err := framework.TestContext.Client.CoreV1().ServiceAccounts("gantry-system").Get(ctx, sa, metav1.GetOptions{})
			return err
		}).Should(gomega.Succeed(), "ServiceAccount gantry-system/%s", sa)
	}
	return identities
}

// grantsNodeDeletion names the ClusterRoles among objs that a
// ClusterRoleBinding among objs gives ServiceAccount gantry-system/sa and
// that allow deleting nodes (wildcards included).
func grantsNodeDeletion(objs []*unstructured.Unstructured, sa string) []string {
	ginkgo.GinkgoHelper()
	roles := map[string]*rbacv1.ClusterRole{}
	var bindings []*rbacv1.ClusterRoleBinding
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			gomega.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, r)).To(gomega.Succeed())
			roles[r.Name] = r
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			gomega.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b)).To(gomega.Succeed())
			bindings = append(bindings, b)
		}
	}
	gomega.Expect(bindings).NotTo(gomega.BeEmpty(), "the shipped identities hold no ClusterRoleBinding")
	var out []string
	for _, b := range bindings {
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == "gantry-system" && s.Name == sa
		}) {
			continue
		}
		r, ok := roles[b.RoleRef.Name]
		if !ok || b.RoleRef.Kind != "ClusterRole" {
			continue
		}
		for _, rule := range r.Rules {
			if anyOf(rule.APIGroups, "") && anyOf(rule.Resources, "nodes") && anyOf(rule.Verbs, "delete") {
				out = append(out, r.Name)
				break
			}
		}
	}
	return out
}

// anyOf reports whether values hold want or the wildcard.
func anyOf(values []string, want string) bool {
	return slices.Contains(values, want) || slices.Contains(values, rbacv1.ResourceAll)
}

// secretNames names the Secrets of namespace ns, with their resource
// versions.
func secretNames(ctx context.Context, ns string) []string {
	ginkgo.GinkgoHelper()
	list, err := framework.TestContext.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name+"@"+s.ResourceVersion)
	}
	return out
}
