package security

import (
	"context"
	"net/http"
	"path/filepath"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/crds/install"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// Finding 6: the scheduler's REST services (every node's pods and labels,
// every reservation with its UID and owners) were served under /apis/v1/,
// which the default role system:discovery opens to every authenticated
// identity.
var _ = framework.Describe("The scheduler's endpoints", ginkgo.Label(framework.LabelSecurity), ginkgo.Serial, func() {
	f := framework.NewFramework("security-endpoints")

	ginkgo.It("need the shipped ClusterRoles, not only the roles every identity has", func(ctx ginkgo.SpecContext) {
		node := framework.KwokNodes(ctx, 1)[0].Name
		tenant := framework.NewTenant(ctx, f.Namespace, "tenant")
		as := func(method, path, body string) func() (int, error) {
			return func() (int, error) { return framework.SchedulerRequestAs(ctx, tenant.Token, method, path, body) }
		}
		services := []string{
			frameworkext.ServicesPrefix + "__services__",
			frameworkext.ServicesPrefix + "nodes/" + node,
			frameworkext.ServicesPrefix + "plugins/Reservation/nodeReservations/" + node,
		}
		ginkgo.By("calling the services and the score-debug toggle as the tenant: 403")
		for _, p := range services {
			gomega.Expect(as(http.MethodGet, p, "")()).To(gomega.Equal(http.StatusForbidden), "GET %s", p)
		}
		gomega.Expect(as(http.MethodPut, "/debug/flags/s", "50")()).To(gomega.Equal(http.StatusForbidden), "PUT /debug/flags/s")
		// system:discovery lets the tenant get /apis/*: nothing is served
		// there any more.
		gomega.Expect(as(http.MethodGet, "/apis/v1/nodes/"+node, "")()).To(gomega.Equal(http.StatusNotFound), "GET the former path /apis/v1/nodes/%s", node)

		ginkgo.By("binding gantry:scheduler-services-viewer (scheduler/config/rbac.yaml) to the tenant")
		roles, err := install.LoadRoles(filepath.Join(framework.TestContext.Root, "scheduler", "config"))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		for _, r := range roles {
			_, err := f.Client.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			ginkgo.DeferCleanup(func(ctx context.Context) error {
				return f.Client.RbacV1().ClusterRoles().Delete(ctx, r.Name, metav1.DeleteOptions{})
			})
		}
		crb, err := f.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: f.Namespace + "-services-viewer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gantry:scheduler-services-viewer"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: tenant.Name, Namespace: tenant.Namespace}},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) error {
			return f.Client.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
		})
		// The scheduler caches authorization answers for a few seconds.
		for _, p := range services {
			framework.Eventually(ctx, as(http.MethodGet, p, "")).Should(gomega.Equal(http.StatusOK), "GET %s with the role", p)
		}
		gomega.Expect(as(http.MethodPut, "/debug/flags/s", "50")()).To(gomega.Equal(http.StatusForbidden), "PUT /debug/flags/s needs the other role")
	})
})
