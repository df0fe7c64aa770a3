package framework

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
)

// Tenant is the identity of docs/security.md's threat model: a
// ServiceAccount bound to the edit ClusterRole (which Gantry's tenant roles
// aggregate into) in its own namespace, and nothing else but what every
// authenticated identity gets (NewTenant); or, for attacks with a stolen
// token, another ServiceAccount with its own rights (ActAs). Its clients
// act as it, with a bearer token and no client certificate.
type Tenant struct {
	// Namespace is the tenant's namespace; Name is its ServiceAccount's.
	Namespace, Name string
	// User is the tenant's user name, as authorization sees it.
	User string
	// Token is the tenant's bearer token.
	Token string
	// Config, Client and Gantry act as the tenant.
	Config *rest.Config
	Client kubernetes.Interface
	Gantry gantryclient.Interface
}

// NewTenant makes a tenant of namespace ns (which must exist): a
// ServiceAccount name bound to edit there, and a token for it valid for an
// hour.
func NewTenant(ctx context.Context, ns, name string) *Tenant {
	ginkgo.GinkgoHelper()
	admin := TestContext.Client
	_, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating ServiceAccount %s/%s", ns, name)
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "binding edit to %s/%s", ns, name)
	t := ActAs(ctx, ns, name)
	// RBAC reaches the authorizer through an informer: wait until the
	// binding (and the aggregation into edit) is in effect.
	Eventually(ctx, func() error {
		_, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	}).Should(gomega.Succeed(), "tenant %s may list pods in its namespace", t.User)
	return t
}

// ActAs acts as the existing ServiceAccount ns/name, with a token valid for
// an hour that the admin requests for it: a tenant that got hold of the
// token of one of Gantry's own identities, say. It has that
// ServiceAccount's rights, and nothing more.
func ActAs(ctx context.Context, ns, name string) *Tenant {
	ginkgo.GinkgoHelper()
	tr, err := TestContext.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "requesting a token for %s/%s", ns, name)
	t := &Tenant{Namespace: ns, Name: name, User: fmt.Sprintf("system:serviceaccount:%s:%s", ns, name), Token: tr.Status.Token}
	t.Config = TenantConfig(tr.Status.Token)
	t.Client, err = kubernetes.NewForConfig(t.Config)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	t.Gantry, err = gantryclient.NewForConfig(t.Config)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return t
}

// TenantConfig is a client configuration for the cluster under test that
// authenticates with token only.
func TenantConfig(token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(TestContext.Config)
	cfg.BearerToken = token
	cfg.QPS, cfg.Burst = 100, 200
	return cfg
}

// Can tells whether the tenant may do verb on resource (group/resource or
// a core resource) in namespace ns, as kube-apiserver's authorizer says
// through a SelfSubjectAccessReview.
func (t *Tenant) Can(ctx context.Context, verb, group, resource, subresource, ns string) bool {
	ginkgo.GinkgoHelper()
	r, err := t.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, selfReview(verb, group, resource, subresource, ns), metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return r.Status.Allowed
}

// CanNamed reports whether the tenant may verb the cluster-scoped object
// name of resource in group.
func (t *Tenant) CanNamed(ctx context.Context, verb, group, resource, name string) bool {
	ginkgo.GinkgoHelper()
	review := selfReview(verb, group, resource, "", "")
	review.Spec.ResourceAttributes.Name = name
	r, err := t.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return r.Status.Allowed
}

func selfReview(verb, group, resource, subresource, ns string) *authorizationv1.SelfSubjectAccessReview {
	return &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: subresource,
		},
	}}
}
