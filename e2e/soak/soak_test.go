//go:build soak

package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	gantryinformers "github.com/gantry-dev/gantry/crds/client/informers/externalversions"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	kindnodes "github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/profiles"
	"github.com/gantry-dev/gantry/test/faultproxy"
	"github.com/gantry-dev/gantry/test/soak/invariants"
	"github.com/gantry-dev/gantry/test/util"
)

// shape is what a run reads and kills on its kind of cluster.
type shape struct {
	// name is the report's Shape: the runtime's name, with "/stock" for
	// upstream's control plane and Gantry's add-ons (the managed overlay).
	name string
	// components are those whose memory the run reads: the control plane
	// and Gantry's components.
	components []string
	// killed are the components the fault loop kills (SIGKILL, as a
	// crash) and restarts, each in turn in an order shuffled every round.
	killed []string
	// webhook: gantry-webhook serves kube-apiserver's admission, and the
	// fault loop kills one replica of it, or both (webhookOne,
	// webhookBoth).
	webhook bool
	// apiTargets are the components the API fault targets, by the
	// product of their User-Agent.
	apiTargets []string
	// faultInterval is the mean time between two faults unless
	// --soak-fault-interval says otherwise.
	faultInterval time.Duration
}

// shapeOf is the shape of the suite's cluster. With Gantry's control
// plane: its kube-apiserver (MetadataPolicy in-process), kube-scheduler,
// kube-controller-manager and gantry-provisioner, and Kueue's manager.
// With the stock one: upstream's kube-apiserver, kube-scheduler and
// kube-controller-manager, and the managed overlay's gantry-scheduler,
// gantry-provisioner and gantry-webhook, and Kueue's manager.
func shapeOf(c *cluster.Cluster) shape {
	if framework.TestContext.ControlPlane != cluster.ControlPlaneStock {
		components := []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager", provisionerComponent}
		return shape{name: c.Runtime().Name(), components: components, killed: append(slices.Clone(components), kueue.Component),
			apiTargets: apiFaultTargets, faultInterval: time.Minute}
	}
	return shape{
		name:          c.Runtime().Name() + "/" + cluster.ControlPlaneStock,
		components:    []string{"kube-apiserver", "kube-controller-manager", framework.SchedulerComponent, provisionerComponent},
		killed:        []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager", framework.SchedulerComponent, provisionerComponent, kueue.Component},
		webhook:       true,
		apiTargets:    stockAPIFaultTargets,
		faultInterval: 45 * time.Second,
	}
}

const (
	// checkEvery is how often the invariants are judged.
	checkEvery = 5 * time.Second
	// settle is how long the checks go on after the work stopped and
	// what it left was deleted: longer than every limit the checker
	// gives a Reservation, a request and a node to go.
	settle = 2 * time.Minute
)

var _ = framework.Describe("Gantry under faults", ginkgo.Label("soak"), ginkgo.Serial, func() {
	ginkgo.It("serves mixed tenant work while its components are killed, with no invariant broken", func(ctx ginkgo.SpecContext) {
		local := framework.RequireLocal("it kills and restarts the cluster's components")
		sh := shapeOf(local)
		if *faultsFlag > 0 {
			sh.faultInterval = *faultsFlag
		}
		seed := *seedFlag
		if seed == 0 {
			seed = rand.Uint64()
		}
		ginkgo.GinkgoWriter.Printf("soak seed %d (--soak-seed=%d repeats this run's schedule)\n", seed, seed)
		rec := newRecorder()

		ginkgo.By("making the tenants' namespaces, quotas, Kueue queues, governing MetadataPolicies and the priority classes of preemption")
		gantry, err := framework.GantryClient()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		w := &world{refused: &refusals{}, nodes: framework.KwokNodes(ctx, 4), additionsOnly: framework.TestContext.ControlPlane == cluster.ControlPlaneStock}
		tenantConfig := rest.CopyConfig(framework.TestContext.Config)
		tenantConfig.Wrap(w.refused.wrap)
		w.client, err = kubernetes.NewForConfig(tenantConfig)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		w.dyn, err = dynamic.NewForConfig(tenantConfig)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(priorityClasses(ctx)).To(gomega.Succeed())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			for _, pc := range []string{victimClass, preemptorClass} {
				_ = framework.TestContext.Client.SchedulingV1().PriorityClasses().Delete(ctx, pc, metav1.DeleteOptions{})
			}
		})
		tenants := make([]*tenant, *tenantsFlag)
		for i := range tenants {
			t := &tenant{name: fmt.Sprintf("t%d", i), rng: rand.New(rand.NewPCG(seed, uint64(i+1))), rec: rec, gantry: gantry, w: w}
			t.requests = namespace(ctx, t.name+"-requests")
			t.pods = namespace(ctx, t.name+"-pods")
			t.jobs = namespace(ctx, t.name+"-jobs")
			gomega.Expect(kueueQueue(ctx, w, t.jobs)).To(gomega.Succeed())
			_, err := framework.TestContext.Client.CoreV1().ResourceQuotas(t.requests).Create(ctx, quota(t.requests, tenantQuotaCPU), metav1.CreateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			for _, ns := range []string{t.requests, t.pods, t.jobs} {
				p, err := w.writePolicy(ctx, governing(ns))
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				gomega.Expect(w.waitPolicyInEffect(ctx, p, time.Minute)).To(gomega.Succeed())
			}
			tenants[i] = t
		}

		ginkgo.By("watching the cluster for the invariant checker")
		cfg := invariants.DefaultConfig()
		if sh.webhook {
			// The managed overlay's gantry-scheduler keeps the Reservation
			// plugin's default TTL; gantry-webhook's replicas serve
			// admission.
			cfg.WebhookNamespace = gantryNamespace
			cfg.WebhookSelector = labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": webhookComponent})
		} else {
			cfg.TerminalReservationTTL = profiles.LocalTerminalReservationTTL
		}
		cfg.ScaleDownUnneededTime = cluster.ScaleDownUnneededTime
		cfg.ScaleDownInterval = 2 * time.Second // both runtimes' --scale-down-interval
		// A component is killed once a round of faults (seven kinds on the
		// local runtime, ten on the stock shape): a lifetime holds a
		// warm-up and two windows in a few minutes.
		cfg.LeakWarmUp, cfg.LeakWindow = 2*time.Minute, time.Minute
		checker := invariants.NewChecker(cfg)
		snapshot := watch(ctx, w)
		check := func() {
			for _, v := range checker.Check(snapshot()) {
				ginkgo.GinkgoWriter.Printf("VIOLATION %s\n", v)
			}
		}

		ginkgo.By("routing the components' requests to kube-apiserver through the fault proxy")
		proxy := routeThroughProxy(ctx, local, sh)

		gomega.Expect(verboseScheduler(ctx)).To(gomega.Succeed())

		ginkgo.By("reading the components' memory every " + defaultMemoryEvery.String())
		memCtx, stopMem := context.WithCancel(ctx)
		defer stopMem()
		mem := sampleMemory(memCtx, 0, componentMetrics(local, map[string]string{provisionerComponent: metricsToken(ctx)}), sh.components)

		started := time.Now()
		ginkgo.By(fmt.Sprintf("working for %s as %d tenants, a fault about every %s", *durationFlag, len(tenants), sh.faultInterval))
		work, stop := context.WithTimeout(ctx, *durationFlag)
		defer stop()
		var wg sync.WaitGroup
		for _, t := range tenants {
			wg.Go(func() {
				for work.Err() == nil {
					t.work(work)
				}
			})
		}
		wg.Go(func() { injectFaults(work, local, sh, proxy, w, rand.New(rand.NewPCG(seed, 0)), rec) })
		ticker := time.NewTicker(checkEvery)
		for work.Err() == nil {
			select {
			case <-work.Done():
			case <-ticker.C:
				check()
			}
		}
		ticker.Stop()
		wg.Wait()
		ran := time.Since(started)

		ginkgo.By(fmt.Sprintf("deleting what the tenants left, and checking for %s more", settle))
		for _, t := range tenants {
			cleanup(ctx, t)
		}
		for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(checkEvery) {
			check()
		}
		check()
		stopMem()
		mem.wait()

		rep := rec.report(seed, started, ran, len(tenants), checker, faultKinds(sh, proxy != nil))
		rep.Shape = sh.name
		rep.judgeMemory(mem, checker, cfg)
		ginkgo.GinkgoWriter.Print(rep.String())
		path := filepath.Join(framework.TestContext.Artifacts, "soak-report.json")
		gomega.Expect(rep.write(path)).To(gomega.Succeed())
		ginkgo.GinkgoWriter.Printf("report written to %s\n", path)
		for _, f := range rep.Faults {
			gomega.Expect(f.Error).To(gomega.BeEmpty(), "%s %s at %s", f.Kind, f.Component, f.At)
		}
		gomega.Expect(rep.Violations).To(gomega.BeEmpty(), "invariants broken")
		gomega.Expect(rep.Failures).To(gomega.BeEmpty(), "tenants' operations failed while kube-apiserver was available")
		gomega.Expect(rep.Shortfalls).To(gomega.BeEmpty(), "the run did too little to prove anything")
	})
})

// provisionerComponent is gantry-provisioner's component name: its
// metrics need a bearer token (metricsToken).
const provisionerComponent = "gantry-provisioner"

// metricsToken makes a ServiceAccount allowed to get /metrics, as the
// scraper an operator binds to gantry-provisioner-metrics-reader is, and
// returns a token of it; all of it is deleted after the run.
func metricsToken(ctx context.Context) string {
	ginkgo.GinkgoHelper()
	c := framework.TestContext.Client
	ns := namespace(ctx, "metrics")
	_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	_, err = c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}},
	}
	_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx context.Context) {
		_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, role.Name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	})
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "scraper", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return tr.Status.Token
}

// namespace makes a namespace for the run, deleted after it.
func namespace(ctx context.Context, base string) string {
	ginkgo.GinkgoHelper()
	c := framework.TestContext.Client
	ns, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "soak-" + base + "-", Labels: map[string]string{"e2e.gantry.dev/suite": "soak"},
	}}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx context.Context) error {
		return c.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	framework.WaitForDefaultServiceAccount(ctx, c, ns.Name)
	return ns.Name
}

// cleanup deletes a tenant's Jobs, requests and pods; the Reservations the
// run made end by their TTL.
func cleanup(ctx context.Context, t *tenant) {
	gomega.Expect(cleanupJobs(ctx, t)).To(gomega.Succeed())
	for _, ns := range []string{t.requests, t.pods} {
		gomega.Expect(t.gantry.AutoscalingXV1().ProvisioningRequests(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})).To(gomega.Succeed())
		gomega.Expect(framework.TestContext.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})).To(gomega.Succeed())
	}
}

// watch starts informers of what the checker judges and returns a function
// that takes a snapshot of them, with kube-scheduler's view of each node
// (its cache and its nominations) when it answers.
func watch(ctx context.Context, w *world) func() *invariants.Snapshot {
	ginkgo.GinkgoHelper()
	gantry, err := framework.GantryClient()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	kf := informers.NewSharedInformerFactory(framework.TestContext.Client, 0)
	gf := gantryinformers.NewSharedInformerFactory(gantry, 0)
	df := dynamicinformer.NewDynamicSharedInformerFactory(w.dyn, 0)
	pods, nodes, quotas := kf.Core().V1().Pods().Lister(), kf.Core().V1().Nodes().Lister(), kf.Core().V1().ResourceQuotas().Lister()
	reservations, requests := gf.Scheduling().V1alpha1().Reservations().Lister(), gf.AutoscalingX().V1().ProvisioningRequests().Lister()
	policies := df.ForResource(metadatapolicy.MetadataPoliciesResource).Lister()
	kf.Start(ctx.Done())
	gf.Start(ctx.Done())
	df.Start(ctx.Done())
	kf.WaitForCacheSync(ctx.Done())
	gf.WaitForCacheSync(ctx.Done())
	df.WaitForCacheSync(ctx.Done())
	ginkgo.DeferCleanup(func() {
		kf.Shutdown()
		gf.Shutdown()
		df.Shutdown()
	})
	all := labels.Everything()
	return func() *invariants.Snapshot {
		s := &invariants.Snapshot{Time: time.Now()}
		s.Pods, _ = pods.List(all)
		s.Nodes, _ = nodes.List(all)
		s.ResourceQuotas, _ = quotas.List(all)
		s.Reservations, _ = reservations.List(all)
		s.ProvisioningRequests, _ = requests.List(all)
		objs, _ := policies.List(all)
		for _, o := range objs {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			p := &policyv1alpha1.MetadataPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err == nil {
				s.MetadataPolicies = append(s.MetadataPolicies, p)
			}
		}
		s.SchedulerNodes = schedulerViews(ctx, s.Nodes)
		s.Refusals = w.refused.drain()
		return s
	}
}

// schedulerViews reads kube-scheduler's view of each node; nil when it
// does not answer (it may be restarting), so that no view is judged.
func schedulerViews(ctx context.Context, nodes []*v1.Node) []frameworkext.NodeView {
	out := make([]frameworkext.NodeView, 0, len(nodes))
	for _, n := range nodes {
		v, err := framework.SchedulerNodeView(ctx, n.Name)
		if err != nil {
			var herr *cluster.ComponentHTTPError
			if errors.As(err, &herr) && herr.StatusCode == http.StatusNotFound {
				continue // a node the scheduler has not seen yet, or no more
			}
			return nil
		}
		out = append(out, *v)
	}
	return out
}

// nodeFault is the fault that deletes one of the cluster's own nodes and
// makes it again after nodeGone.
const (
	nodeFault = "delete node"
	nodeGone  = 20 * time.Second
)

// apiFault is the fault that, for apiFaultWindow, fails one request in
// three of a component's to kube-apiserver (500, 503 or 429) and delays the
// others (0.2-1 s), at the fault proxy: each of the shape's apiTargets in
// turn. A component that sends nothing new in the window (one that only
// watches, as Kueue's manager does while no Job comes) keeps the fault
// until one of its requests was taken, for apiFaultLongest at most.
const (
	apiFault        = "API errors and latency"
	apiFaultWindow  = 15 * time.Second
	apiFaultLongest = 2 * time.Minute
)

// apiFaultTargets are the components the fault proxy stands before, by the
// product of their User-Agent.
var apiFaultTargets = []string{"kube-scheduler", "gantry-provisioner", "kube-controller-manager", kueue.Component}

// faultKinds names the faults injectFaults injects on sh: the API fault
// only with a proxy.
func faultKinds(sh shape, withProxy bool) []string {
	var out []string
	for _, c := range sh.killed {
		out = append(out, "kill -9 "+c)
	}
	return append(out, faults(sh, withProxy)[len(sh.killed):]...)
}

// faults are the faults of a round of injectFaults: the components of
// sh.killed, then the others.
func faults(sh shape, withProxy bool) []string {
	out := append(slices.Clone(sh.killed), nodeFault)
	if sh.webhook {
		out = append(out, webhookOne, webhookBoth)
	}
	if withProxy {
		out = append(out, apiFault)
	}
	return out
}

// routeThroughProxy starts a fault proxy to kube-apiserver and routes the
// cluster's components through it (restarting them), until the spec ends;
// it waits until every one of sh.apiTargets has been seen at the proxy.
// On the local runtime the proxy runs in this process; on the stock
// shape, on the control-plane node (routeOnNode). nil when the runtime
// can do neither.
func routeThroughProxy(ctx context.Context, c *cluster.Cluster, sh shape) injector {
	ginkgo.GinkgoHelper()
	router, ok := c.Runtime().(cluster.ComponentRouter)
	if !ok {
		if sh.webhook {
			return routeOnNode(ctx, c)
		}
		ginkgo.GinkgoWriter.Printf("runtime %s cannot route its components: no fault proxy, no %q faults\n", c.Runtime().Name(), apiFault)
		return nil
	}
	proxy, err := faultproxy.New(framework.TestContext.Config)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx context.Context) error {
		defer proxy.Close()
		_, err := router.RouteComponents(ctx, "")
		return err
	})
	restarted, err := router.RouteComponents(ctx, proxy.URL())
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.GinkgoWriter.Printf("fault proxy at %s; restarted onto it: %v\n", proxy.URL(), restarted)
	waitSeen(ctx, localProxy{proxy}, sh.apiTargets)
	return localProxy{proxy}
}

// injectFaults injects a fault every interval (drawn between half and one
// and a half of --soak-fault-interval) until ctx ends, going through the
// kinds in an order shuffled every round: each component killed and
// restarted, a node deleted and made again, and (with a proxy) one
// component's requests failed and delayed.
func injectFaults(ctx context.Context, c *cluster.Cluster, sh shape, proxy injector, w *world, rng *rand.Rand, rec *recorder) {
	var order, targets []string
	for {
		wait := time.Duration(float64(sh.faultInterval) * (0.5 + rng.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if len(order) == 0 {
			order = faults(sh, proxy != nil)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		what := order[0]
		order = order[1:]
		f := fault{Kind: "kill -9 " + what, Component: what, At: time.Now()}
		// A fault is not cut short by the end of the run.
		var err error
		switch what {
		case nodeFault:
			node := w.nodes[rng.IntN(len(w.nodes))].Name
			f.Kind, f.Component = nodeFault, node
			err = deleteNode(context.WithoutCancel(ctx), node, len(w.nodes))
		case webhookOne:
			f.Kind, f.Component = webhookOne, webhookComponent
			err = c.RestartComponent(context.WithoutCancel(ctx), webhookComponent, syscall.SIGKILL)
		case webhookBoth:
			f.Kind, f.Component = webhookBoth, webhookComponent
			var n int
			if n, err = c.RestartReplicas(context.WithoutCancel(ctx), webhookComponent, syscall.SIGKILL); err == nil && n < 2 {
				err = fmt.Errorf("only %d replica of %s was running", n, webhookComponent)
			}
		case apiFault:
			if len(targets) == 0 {
				targets = slices.Clone(sh.apiTargets)
				rng.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
			}
			f.Kind, f.Component = apiFault, targets[0]
			targets = targets[1:]
			f.Injected, err = faultAPI(context.WithoutCancel(ctx), proxy, f.Component, rng)
			if err == nil && f.Injected == 0 {
				err = fmt.Errorf("no request of %s reached the fault proxy in %s", f.Component, apiFaultLongest)
			}
		default:
			if what == apiserverComponent {
				rec.apiserverDown(f.At)
			}
			err = c.RestartComponent(context.WithoutCancel(ctx), what, syscall.SIGKILL)
			switch {
			case what == apiserverComponent:
				// Back once it is ready: until then it may refuse what its
				// authorizer's caches do not hold yet (kubeadm's admin is
				// authorized by RBAC).
				if err == nil {
					err = waitAPIServerReady(context.WithoutCancel(ctx))
				}
				rec.apiserverUp(time.Now())
			case err != nil:
			case what == kueue.Component:
				// Restarted once its webhooks answer again.
				err = kueue.WaitReady(context.WithoutCancel(ctx), framework.TestContext.Config, kueueDown, nil)
			case what == framework.SchedulerComponent:
				err = verboseScheduler(context.WithoutCancel(ctx))
			}
		}
		if err != nil {
			f.Error = err.Error()
		}
		f.Took = time.Since(f.At)
		ginkgo.GinkgoWriter.Printf("fault: %s %s at %s (%s) %s\n", f.Kind, f.Component, f.At.UTC().Format(time.RFC3339), f.Took.Round(100*time.Millisecond), f.Error)
		if f.Injected > 0 {
			ginkgo.GinkgoWriter.Printf("fault: %d requests of %s failed or delayed\n", f.Injected, f.Component)
		}
		rec.fault(f)
	}
}

// apiserverComponent is kube-apiserver's component name.
const apiserverComponent = "kube-apiserver"

// waitAPIServerReady waits until kube-apiserver answers /readyz with ok.
func waitAPIServerReady(ctx context.Context) error {
	return util.PollSlowly(ctx, 2*time.Minute, "kube-apiserver ready", func(ctx context.Context) (bool, error) {
		body, err := framework.TestContext.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

// verboseScheduler raises kube-scheduler's log verbosity to 2, for the run
// (a restart lowers it again): its log then shows each preemption (node,
// victims, result) and binding, which a violation of the Preemption family
// is read against.
func verboseScheduler(ctx context.Context) error {
	return retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error {
		_, err := framework.SchedulerPut(ctx, "/debug/flags/v", "2")
		return err
	})
}

// faultAPI fails one in three of component's requests to kube-apiserver,
// with a status drawn from 500, 503 and 429, and delays the others by a
// time drawn from 0.2-1 s, for apiFaultWindow and until one request was
// taken (apiFaultLongest at most); it returns how many requests it failed
// or delayed.
func faultAPI(ctx context.Context, proxy injector, component string, rng *rand.Rand) (int, error) {
	statuses := []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests}
	agent := component + "/"
	before, err := proxy.injected(ctx)
	if err != nil {
		return 0, err
	}
	rules := []faultproxy.Rule{
		{UserAgent: agent, Every: 3, Status: statuses[rng.IntN(len(statuses))]},
		{UserAgent: agent, Delay: time.Duration(200+rng.IntN(800)) * time.Millisecond},
	}
	for _, r := range rules {
		if err := proxy.add(ctx, r); err != nil {
			_ = proxy.clear(ctx)
			return 0, err
		}
	}
	time.Sleep(apiFaultWindow)
	for start := time.Now(); time.Since(start) < apiFaultLongest-apiFaultWindow; time.Sleep(time.Second) {
		if n, err := proxy.injected(ctx); err != nil || n > before {
			break
		}
	}
	if err := proxy.clear(ctx); err != nil {
		return 0, err
	}
	after, err := proxy.injected(ctx)
	return after - before, err
}

// deleteNode deletes one of the cluster's own nodes, as a node lost, and
// after nodeGone makes the cluster's nodes (the first n of its topology)
// that are missing again, as the node coming back.
func deleteNode(ctx context.Context, name string, n int) error {
	c := framework.TestContext.Client
	if err := c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", name, err)
	}
	time.Sleep(nodeGone)
	return retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error {
		_, err := kindnodes.Ensure(ctx, c, kindnodes.Topology(n))
		return err
	})
}
