//go:build integration

package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
)

type env struct {
	*schedtest.Env
	t testing.TB
}

// setup: two nodes of 4 CPUs, Gantry's scheduler, the provisioner.
func setup(t *testing.T) *env {
	e := &env{Env: schedtest.Setup(t), t: t}
	e.CreateNodes(2, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner()
	return e
}

const serviceAccountNamespace = "gantry-system"

// asProvisioner installs autoscaler/config/rbac.yaml and returns a client
// config that impersonates its ServiceAccount: the provisioner runs with
// exactly the permissions it ships with.
func (e *env) asProvisioner() *rest.Config {
	e.t.Helper()
	ctx := context.Background()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: serviceAccountNamespace}}
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	root, err := cluster.FindRoot()
	if err != nil {
		e.t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "autoscaler", "config", "rbac.yaml"))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			e.t.Fatalf("rbac.yaml: %v", err)
		}
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
		default:
			e.t.Fatalf("rbac.yaml holds a %T", obj)
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
	o := app.Options{SchedulerName: v1.DefaultSchedulerName,
		LeaderElect: true, LeaderElectionNamespace: serviceAccountNamespace,
		MetricsAddress: "0", HealthAddress: "0", PlacementTimeout: 10 * time.Second, SkipNameValidation: true}
	for _, f := range opts {
		f(&o)
	}
	mgr, err := app.New(ctx, e.asProvisioner(), o)
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

func (e *env) template(ns, name, cpu string) {
	e.t.Helper()
	pt := &v1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Template: v1.PodTemplateSpec{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "img",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}}}}
	if _, err := e.Client.CoreV1().PodTemplates(ns).Create(context.Background(), pt, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) request(ns, name, class, tmpl string, count int32, params map[string]provv1.Parameter) {
	e.t.Helper()
	pr := &provv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: provv1.ProvisioningRequestSpec{ProvisioningClassName: class, Parameters: params,
			PodSets: []provv1.PodSet{{PodTemplateRef: provv1.Reference{Name: tmpl}, Count: count}}}}
	if _, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Create(context.Background(), pr, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// waitCondition waits until the request has condition typ with status and
// reason, and returns the condition.
func (e *env) waitCondition(ns, name, typ string, status metav1.ConditionStatus, reason string, timeout time.Duration) *metav1.Condition {
	e.t.Helper()
	var c *metav1.Condition
	var last *provv1.ProvisioningRequest
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = pr
		c = meta.FindStatusCondition(pr.Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason, nil
	})
	if err != nil {
		var conds []metav1.Condition
		if last != nil {
			conds = last.Status.Conditions
		}
		e.t.Fatalf("request %s/%s: no %s=%s (%s) within %v; conditions %+v", ns, name, typ, status, reason, timeout, conds)
	}
	return c
}

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

func (e *env) uid(ns, name string) string {
	e.t.Helper()
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return string(pr.UID)
}

func (e *env) pod(name string, cpu string, consumes string) {
	e.t.Helper()
	p := st.MakePod().Namespace("default").Name(name).Req(map[v1.ResourceName]string{v1.ResourceCPU: cpu}).Obj()
	if consumes != "" {
		p.Annotations = map[string]string{provv1.AnnotationConsume: consumes}
	}
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	if _, err := e.Client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) nodeOf(name string) string {
	p, err := e.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Spec.NodeName
}

func (e *env) waitFor(what string, timeout time.Duration, cond func() bool) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		e.t.Fatalf("%s: not within %v", what, timeout)
	}
}

// TestCheckCapacity: a request that fits is Provisioned and booked; the
// booking keeps other pods off and lets consumers in; deleting the request
// releases what is left. A request that does not fit fails at once with
// noRetry, and after its validity otherwise. A missing PodTemplate is
// waited for. A namespace quota that cannot admit the pods fails the
// request without booking anything. A short booking expires.
func TestCheckCapacity(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.template("default", "workers", "1")

	t.Run("fits, is booked, keeps others off, consumed, released", func(t *testing.T) {
		e.t = t
		e.request("default", "fits", provv1.ClassCheckCapacity, "workers", 8, nil)
		c := e.waitCondition("default", "fits", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, 30*time.Second)
		t.Logf("Provisioned: %s", c.Message)
		uid := e.uid("default", "fits")
		// 4 pods on each node: one shared Reservation per node.
		if got, _ := e.bookedPods(uid); got != 8 || len(e.bookings(uid)) != 2 {
			t.Fatalf("%d pods booked in %d reservations, want 8 in 2", got, len(e.bookings(uid)))
		}
		if g := gauge(t, "gantry_provisioning_bookings_active"); g != 8 {
			t.Errorf("gantry_provisioning_bookings_active = %v, want 8", g)
		}
		e.pod("outsider", "1", "")
		e.pod("consumer", "1", "fits")
		e.waitFor("consumer scheduled", 30*time.Second, func() bool { return e.nodeOf("consumer") != "" })
		time.Sleep(2 * time.Second)
		if n := e.nodeOf("outsider"); n != "" {
			t.Fatalf("a pod that does not consume the request took booked capacity on %s", n)
		}
		e.waitFor("consumer in its booking", 20*time.Second, func() bool {
			_, came := e.bookedPods(uid)
			return came == 1
		})
		if g := gauge(t, "gantry_provisioning_bookings_active"); g != 7 {
			t.Errorf("gantry_provisioning_bookings_active = %v with 1 of 8 pods come, want 7", g)
		}
		if err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Delete(ctx, "fits", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitFor("request gone (finalizer released)", 20*time.Second, func() bool {
			_, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "fits", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		e.waitFor("booking released", 20*time.Second, func() bool { return len(e.bookings(uid)) == 0 })
		if g := gauge(t, "gantry_provisioning_bookings_active"); g != 0 {
			t.Errorf("gantry_provisioning_bookings_active = %v after the release, want 0", g)
		}
		e.waitFor("outsider scheduled once the booking is released", 30*time.Second, func() bool { return e.nodeOf("outsider") != "" })
		for _, p := range []string{"outsider", "consumer"} {
			_ = e.Client.CoreV1().Pods("default").Delete(ctx, p, metav1.DeleteOptions{})
		}
	})

	t.Run("does not fit, noRetry", func(t *testing.T) {
		e.t = t
		e.request("default", "too-big", provv1.ClassCheckCapacityLegacy, "workers", 20, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
		c := e.waitCondition("default", "too-big", provv1.ConditionFailed, metav1.ConditionTrue, provv1.ReasonCapacityIsNotFound, 30*time.Second)
		if !strings.Contains(c.Message, "Insufficient cpu") {
			t.Errorf("Failed message %q does not give the scheduler's reason", c.Message)
		}
		if got := e.bookings(e.uid("default", "too-big")); len(got) != 0 {
			t.Errorf("%d reservations left by a failed request", len(got))
		}
	})

	t.Run("does not fit, retried until its validity ends", func(t *testing.T) {
		e.t = t
		e.request("default", "short-lived", provv1.ClassCheckCapacity, "workers", 20, map[string]provv1.Parameter{provv1.ParameterValidUntilSeconds: "4"})
		c := e.waitCondition("default", "short-lived", provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound, 30*time.Second)
		t.Logf("Provisioned=False: %s", c.Message)
		e.waitCondition("default", "short-lived", provv1.ConditionFailed, metav1.ConditionTrue, provisioning.ReasonValidityExpired, 30*time.Second)
	})

	t.Run("waits for a missing PodTemplate", func(t *testing.T) {
		e.t = t
		e.request("default", "early", provv1.ClassCheckCapacity, "later", 2, nil)
		e.waitCondition("default", "early", provv1.ConditionAccepted, metav1.ConditionFalse, provisioning.ReasonPodTemplateNotFound, 30*time.Second)
		e.template("default", "later", "500m")
		e.waitCondition("default", "early", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, 30*time.Second)
		_ = e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Delete(ctx, "early", metav1.DeleteOptions{})
	})

	t.Run("quota exceeded", func(t *testing.T) {
		e.t = t
		ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "limited"}}
		if _, err := e.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "limited", Name: "cpu"},
			Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("2")}}}
		if _, err := e.Client.CoreV1().ResourceQuotas("limited").Create(ctx, q, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.template("limited", "workers", "1")
		e.request("limited", "greedy", provv1.ClassCheckCapacity, "workers", 3, nil)
		c := e.waitCondition("limited", "greedy", provv1.ConditionFailed, metav1.ConditionTrue, provisioning.ReasonQuotaExceeded, 30*time.Second)
		if !strings.Contains(c.Message, "requests.cpu requested 3") {
			t.Errorf("QuotaExceeded message %q does not say what was exceeded", c.Message)
		}
		if got := e.bookings(e.uid("limited", "greedy")); len(got) != 0 {
			t.Errorf("%d reservations booked past the quota", len(got))
		}
	})

	t.Run("a short booking expires", func(t *testing.T) {
		e.t = t
		pc := &autoscalingv1alpha1.ProvisioningClass{ObjectMeta: metav1.ObjectMeta{Name: "brief"},
			Spec: autoscalingv1alpha1.ProvisioningClassSpec{Handler: autoscalingv1alpha1.HandlerCheckCapacity,
				BookingDuration: &metav1.Duration{Duration: 3 * time.Second}}}
		if _, err := e.Gantry.AutoscalingV1alpha1().ProvisioningClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.request("default", "brief", "brief", "workers", 2, nil)
		e.waitCondition("default", "brief", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, 30*time.Second)
		c := e.waitCondition("default", "brief", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonBookingExpired, 30*time.Second)
		t.Logf("BookingExpired: %s", c.Message)
		uid := e.uid("default", "brief")
		e.waitFor("expired booking released", 20*time.Second, func() bool { return len(e.bookings(uid)) == 0 })
	})

	// Requests of classes the provisioner does not serve are left alone.
	e.t = t
	e.request("default", "elsewhere", "queued-provisioning.example.com", "workers", 1, nil)
	time.Sleep(2 * time.Second)
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "elsewhere", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Status.Conditions) != 0 || len(pr.Finalizers) != 0 {
		t.Errorf("a request of another class was touched: %+v, finalizers %v", pr.Status.Conditions, pr.Finalizers)
	}
}

// gauge reads a gauge of the provisioner's (controller-runtime's) registry.
func gauge(t *testing.T, name string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestRestartMidBooking: the provisioner stops after booking and before the
// scheduler has placed the booking; a new one (a new leader) takes over,
// confirms the same booking once the scheduler runs, and creates nothing
// twice.
func TestRestartMidBooking(t *testing.T) {
	e := &env{Env: schedtest.Setup(t), t: t}
	e.CreateNodes(2, "4")
	e.template("default", "workers", "1")
	// The production placement timeout: the scheduler starts only after
	// the restart, and must not be raced by the test's short default.
	patient := func(o *app.Options) { o.PlacementTimeout = 30 * time.Second }
	stop := e.startProvisioner(patient)
	e.request("default", "resumed", provv1.ClassCheckCapacity, "workers", 5, nil)
	e.waitCondition("default", "resumed", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonBooking, 30*time.Second)
	uid := e.uid("default", "resumed")
	before := e.bookings(uid)
	if booked, _ := e.bookedPods(uid); booked != 5 {
		t.Fatalf("%d pods booked, want 5", booked)
	}
	stop()

	// No scheduler ran so far: the booking waits to be placed.
	e.startProvisioner(patient)
	e.StartScheduler(schedtest.GantryProfile)
	c := e.waitCondition("default", "resumed", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, 60*time.Second)
	t.Logf("after the restart: %s", c.Message)
	after := e.bookings(uid)
	if len(after) != len(before) {
		t.Fatalf("%d reservations after the restart, want the same %d", len(after), len(before))
	}
	names := map[string]bool{}
	for _, r := range before {
		names[r.Name] = true
	}
	for _, r := range after {
		if !names[r.Name] {
			t.Errorf("reservation %s was created after the restart: the booking was redone", r.Name)
		}
	}
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(context.Background(), "resumed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := pr.Annotations[provisioning.AnnotationAttempts]; n != "" {
		t.Errorf("the restart counted as a failed attempt (%s)", n)
	}
}
