//go:build soak

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"

	gantryinformers "github.com/gantry-dev/gantry/crds/client/informers/externalversions"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/scheduler/profiles"
	"github.com/gantry-dev/gantry/test/soak/invariants"
)

// The components the fault loop kills (SIGKILL, as a crash) and restarts,
// each in turn in an order shuffled every round.
var killed = []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager", "gantry-provisioner"}

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
		seed := *seedFlag
		if seed == 0 {
			seed = rand.Uint64()
		}
		ginkgo.GinkgoWriter.Printf("soak seed %d (--soak-seed=%d repeats this run's schedule)\n", seed, seed)
		rec := newRecorder()

		ginkgo.By("making the tenants' namespaces and quotas")
		gantry, err := framework.GantryClient()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		tenants := make([]*tenant, *tenantsFlag)
		for i := range tenants {
			t := &tenant{name: fmt.Sprintf("t%d", i), rng: rand.New(rand.NewPCG(seed, uint64(i+1))), rec: rec, gantry: gantry}
			t.requests = namespace(ctx, t.name+"-requests")
			t.pods = namespace(ctx, t.name+"-pods")
			_, err := framework.TestContext.Client.CoreV1().ResourceQuotas(t.requests).Create(ctx, quota(t.requests, "2"), metav1.CreateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			tenants[i] = t
		}

		ginkgo.By("watching the cluster for the invariant checker")
		cfg := invariants.DefaultConfig()
		cfg.TerminalReservationTTL = profiles.LocalTerminalReservationTTL
		cfg.ScaleDownUnneededTime = cluster.ScaleDownUnneededTime
		cfg.ScaleDownInterval = 2 * time.Second // the local runtime's --scale-down-interval
		checker := invariants.NewChecker(cfg)
		snapshot := watch(ctx)
		check := func() {
			for _, v := range checker.Check(snapshot()) {
				ginkgo.GinkgoWriter.Printf("VIOLATION %s\n", v)
			}
		}

		started := time.Now()
		ginkgo.By(fmt.Sprintf("working for %s as %d tenants, a fault about every %s", *durationFlag, len(tenants), *faultsFlag))
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
		wg.Go(func() { injectFaults(work, local, rand.New(rand.NewPCG(seed, 0)), rec) })
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

		rep := rec.report(seed, started, ran, len(tenants), checker, killFaultKinds())
		ginkgo.GinkgoWriter.Print(rep.String())
		path := filepath.Join(framework.TestContext.Artifacts, "soak-report.json")
		gomega.Expect(rep.write(path)).To(gomega.Succeed())
		ginkgo.GinkgoWriter.Printf("report written to %s\n", path)
		for _, f := range rep.Faults {
			gomega.Expect(f.Error).To(gomega.BeEmpty(), "%s %s at %s", f.Kind, f.Component, f.At)
		}
		gomega.Expect(rep.Violations).To(gomega.BeEmpty(), "invariants broken")
		gomega.Expect(rep.Shortfalls).To(gomega.BeEmpty(), "the run did too little to prove anything")
	})
})

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

// cleanup deletes a tenant's requests and pods; the Reservations the run
// made end by their TTL.
func cleanup(ctx context.Context, t *tenant) {
	for _, ns := range []string{t.requests, t.pods} {
		gomega.Expect(t.gantry.AutoscalingXV1().ProvisioningRequests(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})).To(gomega.Succeed())
		gomega.Expect(framework.TestContext.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})).To(gomega.Succeed())
	}
}

// watch starts informers of what the checker judges and returns a function
// that takes a snapshot of them.
func watch(ctx context.Context) func() *invariants.Snapshot {
	ginkgo.GinkgoHelper()
	gantry, err := framework.GantryClient()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	kf := informers.NewSharedInformerFactory(framework.TestContext.Client, 0)
	gf := gantryinformers.NewSharedInformerFactory(gantry, 0)
	pods, nodes, quotas := kf.Core().V1().Pods().Lister(), kf.Core().V1().Nodes().Lister(), kf.Core().V1().ResourceQuotas().Lister()
	reservations, requests := gf.Scheduling().V1alpha1().Reservations().Lister(), gf.AutoscalingX().V1().ProvisioningRequests().Lister()
	kf.Start(ctx.Done())
	gf.Start(ctx.Done())
	kf.WaitForCacheSync(ctx.Done())
	gf.WaitForCacheSync(ctx.Done())
	ginkgo.DeferCleanup(func() {
		kf.Shutdown()
		gf.Shutdown()
	})
	all := labels.Everything()
	return func() *invariants.Snapshot {
		s := &invariants.Snapshot{Time: time.Now()}
		s.Pods, _ = pods.List(all)
		s.Nodes, _ = nodes.List(all)
		s.ResourceQuotas, _ = quotas.List(all)
		s.Reservations, _ = reservations.List(all)
		s.ProvisioningRequests, _ = requests.List(all)
		return s
	}
}

// killFaultKinds names the faults injectFaults injects.
func killFaultKinds() []string {
	out := make([]string, 0, len(killed))
	for _, c := range killed {
		out = append(out, "kill -9 "+c)
	}
	return out
}

// injectFaults kills and restarts a component every interval (drawn
// between half and one and a half of --soak-fault-interval) until ctx
// ends, going through the components in an order shuffled every round.
func injectFaults(ctx context.Context, c *cluster.Cluster, rng *rand.Rand, rec *recorder) {
	var order []string
	for {
		wait := time.Duration(float64(*faultsFlag) * (0.5 + rng.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if len(order) == 0 {
			order = append(order, killed...)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		component := order[0]
		order = order[1:]
		f := fault{Kind: "kill -9 " + component, Component: component, At: time.Now()}
		// A restart is not cut short by the end of the run.
		if err := c.RestartComponent(context.WithoutCancel(ctx), component, syscall.SIGKILL); err != nil {
			f.Error = err.Error()
		}
		f.Took = time.Since(f.At)
		ginkgo.GinkgoWriter.Printf("fault: %s at %s (%s) %s\n", f.Kind, f.At.UTC().Format(time.RFC3339), f.Took.Round(100*time.Millisecond), f.Error)
		rec.fault(f)
	}
}
