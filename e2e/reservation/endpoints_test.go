package reservation

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// The scheduler's REST services show every node's pods and labels and
// every reservation with its UID and owners: a tenant must not read them
// with the roles every authenticated identity has.
var _ = framework.Describe("Scheduler endpoints", ginkgo.Label(framework.LabelReservation), ginkgo.Serial, func() {
	f := framework.NewFramework("scheduler-endpoints")
	t := newTester(f)

	ginkgo.It("need the shipped ClusterRoles, not only the default roles", func(ctx ginkgo.SpecContext) {
		node := t.nodes[0].Name
		ginkgo.By("creating a tenant: a ServiceAccount with edit in its namespace")
		sa, err := f.Client.CoreV1().ServiceAccounts(f.Namespace).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = f.Client.RbacV1().RoleBindings(f.Namespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: f.Namespace}},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		tr, err := f.Client.CoreV1().ServiceAccounts(f.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		token := tr.Status.Token

		as := func(method, path, body string) func() (int, error) {
			return func() (int, error) { return framework.SchedulerRequestAs(ctx, token, method, path, body) }
		}
		services := []string{servicesPath, nodesPath + node, nodeReservationsPath + node}
		ginkgo.By("calling the services and the score-debug toggle as the tenant: 403")
		for _, p := range services {
			gomega.Expect(as(http.MethodGet, p, "")()).To(gomega.Equal(http.StatusForbidden), "GET %s", p)
		}
		gomega.Expect(as(http.MethodPut, "/debug/flags/s", "50")()).To(gomega.Equal(http.StatusForbidden), "PUT /debug/flags/s")
		// system:discovery lets the tenant get /apis/*: nothing is served
		// there any more.
		gomega.Expect(as(http.MethodGet, "/apis/v1/nodes/"+node, "")()).To(gomega.Equal(http.StatusNotFound), "GET the former path /apis/v1/nodes/%s", node)

		ginkgo.By("binding gantry:scheduler-services-viewer (scheduler/config/rbac.yaml) to the tenant")
		for _, r := range shippedClusterRoles() {
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
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: f.Namespace}},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) error {
			return f.Client.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
		})
		// The scheduler caches denials for 10s.
		for _, p := range services {
			framework.Eventually(ctx, as(http.MethodGet, p, "")).Should(gomega.Equal(http.StatusOK), "GET %s with the role", p)
		}
		gomega.Expect(as(http.MethodPut, "/debug/flags/s", "50")()).To(gomega.Equal(http.StatusForbidden), "PUT /debug/flags/s needs the other role")
	})
})

// shippedClusterRoles reads scheduler/config/rbac.yaml.
func shippedClusterRoles() []*rbacv1.ClusterRole {
	root, err := cluster.FindRoot()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	file, err := os.Open(filepath.Join(root, "scheduler", "config", "rbac.yaml"))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	defer file.Close()
	var out []*rbacv1.ClusterRole
	dec := utilyaml.NewYAMLOrJSONDecoder(file, 4096)
	for {
		r := &rbacv1.ClusterRole{}
		err := dec.Decode(r)
		if errors.Is(err, io.EOF) {
			return out
		}
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		out = append(out, r)
	}
}
