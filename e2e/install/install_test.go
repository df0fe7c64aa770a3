package install

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/internal/apply"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	kindruntime "github.com/gantry-dev/gantry/kind/pkg/runtime/kind"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

const (
	namespace = "gantry-system"
	partOf    = "app.kubernetes.io/part-of=gantry"
	// loadCreates is at least how many pods are created while the webhook
	// rolls.
	loadCreates = 500
)

var _ = framework.Describe("The managed install", ginkgo.Label(framework.LabelInstall), ginkgo.Ordered, ginkgo.Serial, func() {
	f := framework.NewFramework("install")
	var (
		objs    []*unstructured.Unstructured
		applier *apply.Applier
	)

	ginkgo.BeforeAll(func() {
		if framework.TestContext.ControlPlane != cluster.ControlPlaneStock {
			ginkgo.Skip("the day-2 operations of config/overlays/managed need the stock control plane (--control-plane stock)")
		}
		r, ok := framework.RequireLocal("it applies and deletes what the cluster program installed").Runtime().(interface {
			RenderWorkloads() ([]*unstructured.Unstructured, error)
		})
		if !ok {
			ginkgo.Skip("the cluster's runtime does not install Gantry's manifests")
		}
		var err error
		objs, err = r.RenderWorkloads()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		applier, err = apply.New(framework.TestContext.Config, kindruntime.FieldManager)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	})

	ginkgo.It("changes nothing when applied again", func(ctx ginkgo.SpecContext) {
		before := versions(ctx, applier, objs)
		gomega.Expect(applier.Apply(ctx, objs, false)).To(gomega.Succeed())
		gomega.Expect(versions(ctx, applier, objs)).To(gomega.Equal(before))
	})

	ginkgo.It("refuses no pod create while gantry-webhook rolls", func(ctx ginkgo.SpecContext) {
		old := podNames(ctx, "gantry-webhook")
		var created, failed atomic.Int64
		var (
			mu       sync.Mutex
			refusals []string // the first few, each with its time into the roll
		)
		began := time.Now()
		rolled := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer ginkgo.GinkgoRecover()
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-rolled:
						if created.Load()+failed.Load() >= loadCreates {
							return
						}
					default:
					}
					// Gated: admitted (and reviewed by the webhook), never scheduled.
					p := wrappers.MakePod(fmt.Sprintf("load-%d-%d", w, i), f.Namespace).Gated("gantry.dev/hold").Obj()
					if _, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
						if failed.Add(1) <= 5 {
							mu.Lock()
							refusals = append(refusals, fmt.Sprintf("at %s: %v", time.Since(began).Round(time.Millisecond), err))
							mu.Unlock()
						}
						continue
					}
					created.Add(1)
				}
			}()
		}
		rollRestart(ctx, "gantry-webhook")
		// The old pods serve on for their shutdown delay: keep the load on
		// until they are gone.
		waitPodsGone(ctx, old)
		took := time.Since(began)
		close(rolled)
		wg.Wait()
		ginkgo.GinkgoWriter.Printf("%d pods created, %d refused, while gantry-webhook rolled in %s\n", created.Load(), failed.Load(), took.Round(time.Millisecond))
		gomega.Expect(failed.Load()).To(gomega.BeZero(), "the first refusals:\n%s", strings.Join(refusals, "\n"))
		gomega.Expect(created.Load()).To(gomega.BeNumerically(">=", loadCreates))
		gomega.Expect(podNames(ctx, "gantry-webhook")).NotTo(gomega.ContainElements(old), "the roll replaced no pod")
	})

	ginkgo.It("loses no booking while gantry-provisioner rolls", func(ctx ginkgo.SpecContext) {
		tmpl := wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "100m").NodeSelector(nodes.ManagedLabel, "true").Obj()
		_, err := f.Client.CoreV1().PodTemplates(f.Namespace).Create(ctx, tmpl, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		old := podNames(ctx, "gantry-provisioner")
		names := inFlight(ctx, "gantry-provisioner", 10, func(i int) string {
			pr := wrappers.MakeProvisioningRequest(fmt.Sprintf("req-%d", i), f.Namespace, provv1.ClassCheckCapacity).PodSet("workers", 2).Obj()
			_, err := f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Create(ctx, pr, metav1.CreateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			return pr.Name
		})
		gomega.Expect(podNames(ctx, "gantry-provisioner")).NotTo(gomega.ContainElements(old), "the roll replaced no pod")
		for _, name := range names {
			pr, err := util.WaitForProvisioningRequestCondition(ctx, util.LongTimeout, f.Gantry, f.Namespace, name,
				provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			list, err := f.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID + "=" + string(pr.UID)})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			booked, _ := provisioning.BookingPods(list.Items)
			gomega.Expect(booked).To(gomega.Equal(2), "request %s books %d pods in %d reservations", name, booked, len(list.Items))
		}
	})

	ginkgo.It("loses no reservation while gantry-scheduler rolls", func(ctx ginkgo.SpecContext) {
		old := podNames(ctx, "gantry-scheduler")
		names := inFlight(ctx, "gantry-scheduler", 6, func(i int) string {
			r := f.CreateReservation(ctx, wrappers.MakeReservation(fmt.Sprintf("r%d", i), "cpu", "200m").
				OwnerPod(f.Namespace, fmt.Sprintf("owner-%d", i)).NodeSelector(nodes.ManagedLabel, "true"))
			return r.Name
		})
		gomega.Expect(podNames(ctx, "gantry-scheduler")).NotTo(gomega.ContainElements(old), "the roll replaced no pod")
		for i, name := range names {
			r, err := util.WaitForReservation(ctx, util.LongTimeout, f.Gantry, name, "Available", util.ReservationAvailable)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			p := f.CreatePod(ctx, wrappers.MakePod(fmt.Sprintf("owner-%d", i), f.Namespace).Requests("cpu", "200m").NodeSelector(nodes.ManagedLabel, "true"))
			bound := f.WaitScheduled(ctx, util.LongTimeout, p.Name)
			gomega.Expect(bound.Spec.NodeName).To(gomega.Equal(r.Status.NodeName), "owner %s did not land in reservation %s", p.Name, name)
		}
	})

	ginkgo.It("removes everything it made when deleted", func(ctx ginkgo.SpecContext) {
		if !framework.TestContext.OwnCluster {
			ginkgo.Skip("it removes Gantry's install: only on a cluster the suite brought up")
		}
		// The suite's Applier deletes, then waits until each object is gone.
		deleter, err := framework.NewApplier()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(deleter.Delete(ctx, objs)).To(gomega.Succeed())
		ginkgo.By("finding nothing labelled " + partOf + " in any resource")
		gomega.Expect(labelled(ctx)).To(gomega.BeEmpty())
		ginkgo.By("creating a pod: no webhook configuration is left to refuse it")
		p := wrappers.MakePod("after", f.Namespace).SchedulerName(v1.DefaultSchedulerName).Obj()
		_, err = f.Client.CoreV1().Pods(f.Namespace).Create(ctx, p, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	})
})

// versions are the generation (objects whose spec has one) or else the
// resourceVersion of each object as the API server holds it.
func versions(ctx context.Context, a *apply.Applier, objs []*unstructured.Unstructured) map[string]string {
	ginkgo.GinkgoHelper()
	out := map[string]string{}
	for _, o := range objs {
		ri, err := a.Resource(o)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		got, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		key := o.GetKind() + " " + apply.Name(o)
		if g := got.GetGeneration(); g > 0 {
			out[key] = fmt.Sprintf("generation %d", g)
		} else {
			out[key] = "resourceVersion " + got.GetResourceVersion()
		}
	}
	return out
}

// podNames are the names of the Deployment's pods, less those being
// deleted.
func podNames(ctx context.Context, deployment string) []string {
	ginkgo.GinkgoHelper()
	list, err := framework.TestContext.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + deployment})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var out []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	gomega.Expect(out).NotTo(gomega.BeEmpty(), "Deployment %s has no pods", deployment)
	return out
}

// waitPodsGone waits until the pods of gantry-system named are deleted.
func waitPodsGone(ctx context.Context, names []string) {
	ginkgo.GinkgoHelper()
	pods := framework.TestContext.Client.CoreV1().Pods(namespace)
	framework.Eventually(ctx, func(g gomega.Gomega) {
		for _, name := range names {
			_, err := pods.Get(ctx, name, metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "pod %s: %v", name, err)
		}
	}).Should(gomega.Succeed())
}

// inFlight restarts the Deployment and, while it rolls, makes n objects
// with create, spread over the roll; it returns their names once the roll
// is done and the old pods are gone.
func inFlight(ctx context.Context, deployment string, n int, create func(i int) string) []string {
	ginkgo.GinkgoHelper()
	old := podNames(ctx, deployment)
	done := make(chan struct{})
	go func() {
		defer ginkgo.GinkgoRecover()
		defer close(done)
		rollRestart(ctx, deployment)
		waitPodsGone(ctx, old)
	}()
	var names []string
	for i := range n {
		names = append(names, create(i))
		time.Sleep(time.Second)
	}
	<-done
	return names
}

// rollRestart does what `kubectl rollout restart` does and waits until the
// rollout is complete: every replica updated and available, none old left.
func rollRestart(ctx context.Context, name string) {
	ginkgo.GinkgoHelper()
	c := framework.TestContext.Client.AppsV1().Deployments(namespace)
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	d, err := c.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gen := d.Generation
	_, err = util.WaitFor(ctx, util.LongTimeout, "Deployment "+name+" rolled out",
		func(ctx context.Context) (*appsv1.Deployment, error) { return c.Get(ctx, name, metav1.GetOptions{}) },
		func(d *appsv1.Deployment) bool {
			want := *d.Spec.Replicas
			return d.Status.ObservedGeneration >= gen && d.Status.UpdatedReplicas == want &&
				d.Status.Replicas == want && d.Status.AvailableReplicas == want
		},
		func(d *appsv1.Deployment) string {
			return fmt.Sprintf("generation %d observed %d, %d replicas, %d updated, %d available", gen, d.Status.ObservedGeneration,
				d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas)
		})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
}

// labelled lists, in every resource that can be listed, the objects
// labelled as Gantry's.
func labelled(ctx context.Context) []string {
	ginkgo.GinkgoHelper()
	cfg := framework.TestContext.Config
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	dyn, err := dynamic.NewForConfig(cfg)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	lists, err := dc.ServerPreferredResources()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var out []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: partOf})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "listing %s", r.Name)
			for _, it := range items.Items {
				out = append(out, r.Name+" "+apply.Name(&it))
			}
		}
	}
	return out
}
