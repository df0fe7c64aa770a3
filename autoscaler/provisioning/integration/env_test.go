//go:build integration

package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups/kwok"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/internal/kustomize"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// env is schedtest's control plane (Gantry's CRDs, a fault proxy, Gantry's
// scheduler on demand) with the provisioner, node groups and a stand-in
// kubelet on demand.
type env struct {
	*schedtest.Env
	// t is the test or subtest that helpers fail.
	t testing.TB
}

func newEnv(t testing.TB) *env { return &env{Env: schedtest.Setup(t), t: t} }

// setup: two nodes of 4 CPUs, Gantry's scheduler, the provisioner.
func setup(t *testing.T) *env {
	e := newEnv(t)
	e.CreateNodes(2, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner()
	return e
}

const serviceAccountNamespace = "gantry-system"

// asProvisioner installs the RBAC objects of autoscaler/config with the
// kwok node-group provider (overlays/kwok, rendered as kubectl apply -k
// would) and the components of autoscaler/config/components named, and
// returns a client config that impersonates its ServiceAccount: the
// provisioner runs with exactly the permissions it ships with.
func (e *env) asProvisioner(components ...string) *rest.Config {
	e.t.Helper()
	ctx := context.Background()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: serviceAccountNamespace}}
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	config := filepath.Join(framework.Root(e.t), "autoscaler", "config")
	dir := filepath.Join(config, "overlays", "kwok")
	if len(components) > 0 {
		paths := make([]string, len(components))
		for i, c := range components {
			paths[i] = filepath.Join(config, "components", c)
		}
		with := e.t.TempDir()
		if err := kustomize.WriteWithComponents(with, dir, paths...); err != nil {
			e.t.Fatal(err)
		}
		dir = with
	}
	objs, err := util.Kustomize(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *v1.ServiceAccount:
			_, err = e.Client.CoreV1().ServiceAccounts(serviceAccountNamespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = e.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = e.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = e.Client.RbacV1().Roles(serviceAccountNamespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = e.Client.RbacV1().RoleBindings(serviceAccountNamespace).Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = e.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = e.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		case *v1.Namespace, *appsv1.Deployment, *v1.Service, *policyv1.PodDisruptionBudget:
			// Not RBAC: the test runs the provisioner in-process.
		default:
			e.t.Fatalf("%s renders a %T", dir, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			e.t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + serviceAccountNamespace + ":gantry-provisioner",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + serviceAccountNamespace, "system:authenticated"},
	}
	return cfg
}

// startProvisioner runs gantry-provisioner's manager in-process (leader
// elected, as deployed), with options changed by opts; the returned func
// stops it and waits.
func (e *env) startProvisioner(opts ...func(*app.Options)) (stop func()) {
	_, ctx := ktesting.NewTestContext(e.t)
	ctx, cancel := context.WithCancel(ctx)
	defaults := app.NewOptions()
	o := app.Options{SchedulerName: v1.DefaultSchedulerName,
		LeaderElect: true, LeaderElectionNamespace: serviceAccountNamespace,
		MetricsAddress: "0", HealthAddress: "0", PlacementTimeout: 10 * time.Second, SkipNameValidation: true,
		UpstreamClasses: true, Workers: defaults.Workers, QPS: defaults.QPS, Burst: defaults.Burst}
	for _, f := range opts {
		f(&o)
	}
	// The provisioner's client at its own limits (o.QPS, o.Burst), as
	// deployed: app.New applies them only to a config that sets none.
	var components []string
	if o.PodGroupRequestsClass != "" {
		components = append(components, "pod-group-requests")
	}
	cfg := e.asProvisioner(components...)
	cfg.QPS, cfg.Burst = 0, 0
	mgr, err := app.New(ctx, cfg, o)
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			e.t.Errorf("provisioner: %v", err)
		}
	}()
	stop = func() { cancel(); <-done }
	e.t.Cleanup(stop)
	return stop
}

// nodeGroups is the kwok provider's configuration for these tests: a
// healthy pool, a group one node of each scale-up never comes up in, one
// whose creates fail, a large one for the benchmark, and one none of
// whose nodes come up.
const nodeGroups = `
nodeGroups:
- name: pool
  maxSize: 20
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
- name: flaky
  maxSize: 10
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  failureInjection: {neverReady: 1}
- name: broken
  maxSize: 10
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  failureInjection: {createErrors: 1}
- name: wide
  maxSize: 200
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
- name: stuck
  maxSize: 10
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  failureInjection: {neverReady: 10}
`

// withNodeGroups runs the provisioner with the kwok provider and a quick
// scale-down.
func (e *env) withNodeGroups(o *app.Options) {
	path := filepath.Join(e.Dir, "node-groups.yaml")
	if err := os.WriteFile(path, []byte(nodeGroups), 0o600); err != nil {
		e.t.Fatal(err)
	}
	o.NodeGroupProvider, o.NodeGroupConfig = "kwok", path
	o.ScaleDownUnneededTime, o.ScaleDownInterval, o.ScaleDownTaintGrace = 2*time.Second, 500*time.Millisecond, 500*time.Millisecond
	// Each test's class names the groups it may use: a failed group is
	// retried at once (the unit tests and the kueue e2e suite test the
	// backoff).
	o.NodeGroupBackoff, o.MaxNodeGroupBackoff = time.Millisecond, time.Millisecond
}

// startKubelet stands in for the kwok controller and the node lifecycle
// controller: nodes handed to kwok (its annotation) become Ready and lose
// the not-ready taint admission gave them. The returned func stops it.
func (e *env) startKubelet() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			list, err := e.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					n := &list.Items[i]
					if n.Annotations[kwok.KwokAnnotation] == "" || len(n.Spec.Taints) == 0 && isReady(n) {
						continue
					}
					if !isReady(n) {
						n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
						if n, err = e.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
							continue
						}
					}
					kept := n.Spec.Taints[:0]
					for _, t := range n.Spec.Taints {
						if t.Key != v1.TaintNodeNotReady {
							kept = append(kept, t)
						}
					}
					n.Spec.Taints = kept
					_, _ = e.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	stop = func() { cancel(); <-done }
	e.t.Cleanup(stop)
	return stop
}

func isReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// groupNodes are the nodes of a node group.
func (e *env) groupNodes(group string) []v1.Node {
	e.t.Helper()
	list, err := e.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=" + group})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// namespaceWithQuota creates namespace ns with a ResourceQuota "cpu" of
// cpu CPUs requested, and returns the quota as created.
func (e *env) namespaceWithQuota(ns, cpu string) *v1.ResourceQuota {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cpu"},
		Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse(cpu)}}}
	q, err := e.Client.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return q
}

// quotaUsed writes the status the quota controller would write (this
// control plane runs none): q's hard limits, and used.
func (e *env) quotaUsed(q *v1.ResourceQuota, cpu string) {
	e.t.Helper()
	q.Status = v1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse(cpu)}}
	if _, err := e.Client.CoreV1().ResourceQuotas(q.Namespace).UpdateStatus(context.Background(), q, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// template creates a PodTemplate of one container requesting cpu.
func (e *env) template(ns, name, cpu string) {
	e.t.Helper()
	pt := wrappers.MakePodTemplate(name, ns).Requests("cpu", cpu).Obj()
	if _, err := e.Client.CoreV1().PodTemplates(ns).Create(context.Background(), pt, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// class creates an atomic-scale-up ProvisioningClass.
func (e *env) class(name string, spec autoscalingv1alpha1.ProvisioningClassSpec) {
	e.t.Helper()
	spec.Handler = autoscalingv1alpha1.HandlerAtomicScaleUp
	pc := &autoscalingv1alpha1.ProvisioningClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if _, err := e.Gantry.AutoscalingV1alpha1().ProvisioningClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func seconds(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// request creates a request of class for count pods of the PodTemplate
// tmpl.
func (e *env) request(ns, name, class, tmpl string, count int32, params map[string]provv1.Parameter) {
	e.t.Helper()
	pr := wrappers.MakeProvisioningRequest(name, ns, class).PodSet(tmpl, count).Parameters(params).Obj()
	if _, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Create(context.Background(), pr, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// deleteRequest deletes a request and waits until it is gone (its
// finalizer released).
func (e *env) deleteRequest(ns, name string) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	util.Must(e.t).Until(ctx, util.Timeout, "request "+name+" gone", func(ctx context.Context) bool {
		_, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// waitCondition waits until the request has condition typ with status and
// reason, and returns the condition.
func (e *env) waitCondition(ns, name, typ string, status metav1.ConditionStatus, reason string, timeout time.Duration) *metav1.Condition {
	e.t.Helper()
	pr := util.Must(e.t).WaitForProvisioningRequestCondition(context.Background(), timeout, e.Gantry, ns, name, typ, status, reason)
	return meta.FindStatusCondition(pr.Status.Conditions, typ)
}

// expectFailed waits until the request is Failed=True for reason, and
// checks that the condition's message contains want, which says why.
func (e *env) expectFailed(ns, name, reason, want, why string) {
	e.t.Helper()
	c := e.waitCondition(ns, name, provv1.ConditionFailed, metav1.ConditionTrue, reason, util.Timeout)
	if !strings.Contains(c.Message, want) {
		e.t.Errorf("Failed message %q does not contain %q: it does not say %s", c.Message, want, why)
	}
}

func (e *env) uid(ns, name string) string {
	e.t.Helper()
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return string(pr.UID)
}

// bookings are the reservations of the request of this UID.
func (e *env) bookings(uidOf string) []schedv1alpha1.Reservation {
	e.t.Helper()
	list, err := e.Gantry.SchedulingV1alpha1().Reservations().List(context.Background(), metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID + "=" + uidOf})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// bookedPods sums up a request's booking in pods: booked, and come.
func (e *env) bookedPods(uid string) (booked, came int) {
	e.t.Helper()
	return provisioning.BookingPods(e.bookings(uid))
}

// placedPods sums up the pods booked in the Available reservations of rs.
func placedPods(rs []schedv1alpha1.Reservation) int {
	placed := 0
	for i := range rs {
		if rs[i].Status.Phase == schedv1alpha1.ReservationAvailable {
			placed += provisioning.BookedPods(&rs[i])
		}
	}
	return placed
}

// pod creates a pod of namespace default requesting cpu that consumes the
// request named consumes, if any.
func (e *env) pod(name string, cpu string, consumes string) {
	e.t.Helper()
	p := wrappers.MakePod(name, "default").Requests("cpu", cpu).NoGrace()
	if consumes != "" {
		p.Annotation(provv1.AnnotationConsume, consumes)
	}
	if _, err := e.Client.CoreV1().Pods("default").Create(context.Background(), p.Obj(), metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// finishOnceBound waits for pod name to be bound, then marks it Succeeded
// at once, as the kubelet does for a pod whose containers exit at start.
func (e *env) finishOnceBound(name string) {
	e.t.Helper()
	ctx := context.Background()
	var bound *v1.Pod
	util.Must(e.t).Until(ctx, util.Timeout, "pod "+name+" bound", func(ctx context.Context) bool {
		p, err := e.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" {
			return false
		}
		bound = p
		return true
	})
	bound.Status.Phase = v1.PodSucceeded
	if _, err := e.Client.CoreV1().Pods("default").UpdateStatus(ctx, bound, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deletePods(names ...string) {
	for _, name := range names {
		_ = e.Client.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	}
}

func (e *env) nodeOf(name string) string {
	e.t.Helper()
	p, err := e.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Spec.NodeName
}

// expectBookingHonoured creates two pods of cpu, an outsider and a
// consumer of the request: the consumer is scheduled, and the outsider
// stays off the booked capacity.
func (e *env) expectBookingHonoured(request, cpu string) {
	e.t.Helper()
	e.pod("outsider", cpu, "")
	e.pod("consumer", cpu, request)
	util.Must(e.t).Until(context.Background(), util.Timeout, "consumer scheduled", func(context.Context) bool { return e.nodeOf("consumer") != "" })
	time.Sleep(util.ConsistentDuration)
	if n := e.nodeOf("outsider"); n != "" {
		e.t.Fatalf("a pod that does not consume the request took booked capacity on %s", n)
	}
}

// gauge reads a gauge of the provisioner's (controller-runtime's) registry.
func gauge(t *testing.T, name string) float64 {
	t.Helper()
	v, found, err := util.MetricValue(ctrlmetrics.Registry, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("no gauge %s", name)
	}
	return v
}

// counterSum is the sum over a counter's series in the provisioner's
// registry (controller-runtime's: the scheduler does not use it).
func counterSum(t testing.TB, name string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
