//go:build upgrade

package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/scheduler/profiles"
	"github.com/gantry-dev/gantry/test/soak/invariants"
	"github.com/gantry-dev/gantry/test/util"
	utilgomega "github.com/gantry-dev/gantry/test/util/gomega"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// What the seeded objects carry.
const (
	// gate holds the pods that come after the upgrade.
	gate = "upgrade.gantry.dev/after"
	// governedLabel is what the namespace's MetadataPolicy puts on every
	// pod; a pod with forbiddenLabel is rejected.
	governedLabel  = "upgrade.gantry.dev/governed"
	forbiddenLabel = "upgrade.gantry.dev/forbidden"
	// doomedTaint keeps every pod but the revoked request's off the node
	// the suite deletes.
	doomedTaint = "upgrade.gantry.dev/doomed"
	// longBooking outlasts the upgrade: a booking must not end by time
	// while the suite compares it.
	longBooking = 2 * time.Hour
)

var _ = framework.Describe("Upgrade in place", ginkgo.Label(framework.LabelUpgrade), ginkgo.Serial, func() {
	f := framework.NewFramework("upgrade")

	ginkgo.It("keeps every object of the earlier release served and unchanged through each step, with no booking doubled, and the new release works", func(ctx ginkgo.SpecContext) {
		local := framework.RequireLocal("it upgrades the cluster's components")
		u := newUpgrader(f)
		u.seed(ctx)

		base := u.inventory(ctx)
		ginkgo.GinkgoWriter.Printf("seeded on the earlier release (%s):\n%s", u.components(ctx), dump(base))
		stopWatch := u.watch(ctx)

		steps, err := local.UpgradeSteps()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		var stages []stage
		for _, step := range steps {
			ginkgo.By("upgrading " + step)
			gomega.Expect(local.Upgrade(ctx, []string{step})).To(gomega.Succeed())
			st := u.stage(ctx, step, base)
			stages = append(stages, st)
			gomega.Expect(st.Problems).To(gomega.BeEmpty(), "after upgrading %s, objects of the earlier release were not served as they were", step)
			if step == "kube-apiserver" {
				u.midUpgrade(ctx)
			}
		}
		violations := stopWatch()
		report := table(base, stages)
		ginkgo.GinkgoWriter.Printf("objects of the earlier release served unchanged / all served, per kind:\n%s", report)
		writeReport(base, stages, violations)
		gomega.Expect(violations).To(gomega.BeEmpty(), "the invariant checker saw violations during the upgrade")

		u.afterUpgrade(ctx)
	})
})

// upgrader is the spec's state: clients, the seeded objects' names.
type upgrader struct {
	f      *framework.Framework
	dyn    dynamic.Interface
	ns     string
	reader *reader
	// doomed is the node the revoked request booked, deleted.
	doomed string
	class  string
	atomic string
}

func newUpgrader(f *framework.Framework) *upgrader {
	dyn, err := dynamic.NewForConfig(framework.TestContext.Config)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	u := &upgrader{f: f, dyn: dyn, ns: f.Namespace, class: f.Namespace + "-long-check", atomic: f.Namespace + "-long-scale-up",
		doomed: f.Namespace + "-doomed"}
	u.reader = &reader{client: f.Client, gantry: f.Gantry, dyn: dyn, ns: f.Namespace}
	return u
}

// inventory reads every kind, retrying while kube-apiserver does not
// answer.
func (u *upgrader) inventory(ctx context.Context) inventory {
	ginkgo.GinkgoHelper()
	var inv inventory
	framework.Eventually(ctx, func() error {
		var err error
		inv, _, err = u.reader.take(ctx)
		return err
	}).Should(gomega.Succeed())
	return inv
}

func (u *upgrader) stage(ctx context.Context, step string, base inventory) stage {
	inv := u.inventory(ctx)
	unchanged, problems := kept(base, inv)
	served := map[string]int{}
	for k, m := range inv {
		served[k] = len(m)
	}
	st := stage{After: step, Components: u.components(ctx), Unchanged: unchanged, Served: served, Problems: problems}
	for _, p := range problems {
		ginkgo.GinkgoWriter.Printf("after %s: %s\n", step, p)
	}
	return st
}

// components names the release of what runs: kube-apiserver's version,
// each control-plane pod's and Gantry Deployment's image tag, and the
// kubelets' versions.
func (u *upgrader) components(ctx context.Context) string {
	var parts []string
	if v, err := u.f.Client.Discovery().ServerVersion(); err == nil {
		parts = append(parts, "kube-apiserver "+v.GitVersion)
	}
	for _, ns := range []string{metav1.NamespaceSystem, "gantry-system"} {
		pods, err := u.f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != v1.PodRunning {
				continue
			}
			for _, c := range p.Spec.Containers {
				if _, tag, ok := strings.Cut(strings.TrimPrefix(c.Image, "gantry.local/"), ":"); ok && c.Name != "kube-proxy" && c.Name != "kindnet-cni" {
					if part := c.Name + " " + tag; !slices.Contains(parts, part) {
						parts = append(parts, part)
					}
				}
			}
		}
	}
	if list, err := u.f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type!=kwok"}); err == nil {
		for _, n := range list.Items {
			if part := "kubelet " + n.Status.NodeInfo.KubeletVersion; !slices.Contains(parts, part) {
				parts = append(parts, part)
			}
		}
	}
	return strings.Join(parts, ", ")
}

// watch judges the cluster with the soak's invariant checker every few
// seconds until the returned function is called, which returns the
// violations seen. Snapshots kube-apiserver does not answer are skipped.
func (u *upgrader) watch(ctx context.Context) func() []invariants.Violation {
	cfg := invariants.DefaultConfig()
	if framework.TestContext.ControlPlane == cluster.ControlPlaneGantry {
		cfg.TerminalReservationTTL = profiles.LocalTerminalReservationTTL
	}
	cfg.ScaleDownUnneededTime = cluster.ScaleDownUnneededTime
	cfg.ScaleDownInterval = 2 * time.Second
	checker := invariants.NewChecker(cfg)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var seen []invariants.Violation
	wg.Go(func() {
		for wctx.Err() == nil {
			if _, s, err := u.reader.take(wctx); err == nil {
				vs := checker.Check(s)
				mu.Lock()
				seen = append(seen, vs...)
				mu.Unlock()
				for _, v := range vs {
					ginkgo.GinkgoWriter.Printf("VIOLATION %s\n", v)
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(3 * time.Second):
			}
		}
	})
	return func() []invariants.Violation {
		cancel()
		wg.Wait()
		ginkgo.GinkgoWriter.Printf("invariant checks made during the upgrade: %s\n", checker.Checks())
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

func dump(inv inventory) string {
	var b strings.Builder
	for _, k := range kinds {
		for name, it := range inv[k] {
			fmt.Fprintf(&b, "  %s %s: %s\n", k, name, it.State)
		}
	}
	return b.String()
}

// writeReport writes the per-kind report to the artifacts, for the note.
func writeReport(base inventory, stages []stage, violations []invariants.Violation) {
	vs := make([]string, 0, len(violations))
	for _, v := range violations {
		vs = append(vs, v.String())
	}
	data, err := json.MarshalIndent(map[string]any{"seeded": base, "stages": stages, "violations": vs, "table": table(base, stages)}, "", "  ")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	file := filepath.Join(framework.TestContext.Artifacts, "upgrade-report.json")
	gomega.Expect(os.WriteFile(file, data, 0o644)).To(gomega.Succeed())
	ginkgo.GinkgoWriter.Printf("report written to %s\n", file)
}

// --- the seed: what a cluster of the earlier release holds ---

func (u *upgrader) seed(ctx context.Context) {
	ginkgo.GinkgoHelper()
	c, g := u.f.Client, u.f.Gantry

	ginkgo.By("classes that book for longer than the upgrade takes")
	for _, cl := range []*wrappers.ProvisioningClassWrapper{
		wrappers.MakeProvisioningClass(u.class, autoscalingv1alpha1.HandlerCheckCapacity).BookingDuration(longBooking),
		wrappers.MakeProvisioningClass(u.atomic, autoscalingv1alpha1.HandlerAtomicScaleUp).NodeGroups("general").BookingDuration(longBooking),
	} {
		_, err := g.AutoscalingV1alpha1().ProvisioningClasses().Create(ctx, cl.Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		name := cl.Name
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = g.AutoscalingV1alpha1().ProvisioningClasses().Delete(ctx, name, metav1.DeleteOptions{})
		})
	}

	ginkgo.By("a MetadataPolicy that labels every pod and rejects forbidden ones")
	policy := wrappers.MakeMetadataPolicy("governing", u.ns).
		Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{UpdatedLabels: map[string]policyv1alpha1.LabelValue{governedLabel: "true"}}).
		Rule(policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{forbiddenLabel: "true"}}},
			policyv1alpha1.PolicyAction{Reject: true}).Obj()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(policy)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = u.dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(u.ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	framework.Eventually(ctx, func(g gomega.Gomega) {
		u, err := u.dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(u.ns).Get(ctx, "governing", metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		var p policyv1alpha1.MetadataPolicy
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)).To(gomega.Succeed())
		g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, policyv1alpha1.ConditionReady)).To(gomega.BeTrue(), "policy not Ready: %v", p.Status.Conditions)
	}).Should(gomega.Succeed())
	u.expectGoverned(ctx, "policy-probe")

	ginkgo.By("pod templates: half a CPU, a pod a general node holds alone, and one for the node the suite deletes")
	for _, t := range []*wrappers.PodTemplateWrapper{
		wrappers.MakePodTemplate("small", u.ns).NodeSelector("type", "kwok").Requests("cpu", "500m", "memory", "64Mi"),
		wrappers.MakePodTemplate("big", u.ns).Requests("cpu", "6").NodeSelector(nodegroups.LabelNodeGroup, "general"),
		wrappers.MakePodTemplate("pinned", u.ns).Requests("cpu", "500m").NodeSelector(v1.LabelHostname, u.doomed).Toleration(doomedTaint),
	} {
		_, err := c.CoreV1().PodTemplates(u.ns).Create(ctx, t.Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}

	ginkgo.By("a Reservation holding room for owners to come, and one its owner was placed in")
	rsv := g.SchedulingV1alpha1().Reservations()
	held := u.f.CreateReservation(ctx, wrappers.MakeReservation("held", "cpu", "500m").NodeSelector("type", "kwok").OwnerLabels(u.ns, map[string]string{"app": "held"}))
	owned := u.f.CreateReservation(ctx, wrappers.MakeReservation("owned", "cpu", "500m").NodeSelector("type", "kwok").OwnerPod(u.ns, "owner-0").AllocateOnce(false))
	for _, name := range []string{held.Name, owned.Name} {
		framework.Eventually(ctx, func() schedv1alpha1.ReservationPhase {
			r, err := rsv.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return ""
			}
			return r.Status.Phase
		}).Should(gomega.Equal(schedv1alpha1.ReservationAvailable), "reservation %s", name)
	}
	u.f.CreatePod(ctx, kwokPod("owner-0", u.ns).Requests("cpu", "500m", "memory", "64Mi"))
	framework.Eventually(ctx, func() []v1.ObjectReference {
		r, err := rsv.Get(ctx, owned.Name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return r.Status.CurrentOwners
	}).Should(gomega.ContainElement(gomega.HaveField("Name", "owner-0")), "owner-0 not placed in its reservation")

	ginkgo.By("a kwok node only the revoked request's pods may use")
	doomed := nodes.Topology(4)[3]
	doomed.Name = u.doomed
	doomed.Labels[v1.LabelHostname] = u.doomed
	doomed.Spec.Taints = []v1.Taint{{Key: doomedTaint, Effect: v1.TaintEffectNoSchedule}}
	_, err = c.CoreV1().Nodes().Create(ctx, doomed, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx context.Context) { _ = c.CoreV1().Nodes().Delete(ctx, u.doomed, metav1.DeleteOptions{}) })
	framework.Eventually(ctx, func() bool {
		n, err := c.CoreV1().Nodes().Get(ctx, u.doomed, metav1.GetOptions{})
		return err == nil && nodes.IsReady(n)
	}).Should(gomega.BeTrue(), "kwok did not make node %s Ready", u.doomed)

	ginkgo.By("ProvisioningRequests in every state")
	// booked: Provisioned, one of its two pods come, the other gated.
	u.request(ctx, "booked", u.class, "small", 2, nil)
	u.waitCondition(ctx, "booked", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound)
	u.f.CreatePod(ctx, kwokPod("booked-0", u.ns).Requests("cpu", "500m", "memory", "64Mi").Annotation(provv1.AnnotationConsume, "booked"))
	u.f.CreatePod(ctx, kwokPod("booked-1", u.ns).Requests("cpu", "500m", "memory", "64Mi").Annotation(provv1.AnnotationConsume, "booked").Gated(gate))
	u.f.WaitScheduled(ctx, util.LongTimeout, "booked-0")
	// consumed: BookingExpired, every pod come.
	u.request(ctx, "consumed", provv1.ClassCheckCapacity, "small", 1, nil)
	u.waitCondition(ctx, "consumed", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound)
	u.f.CreatePod(ctx, kwokPod("consumed-0", u.ns).Requests("cpu", "500m", "memory", "64Mi").Annotation(provv1.AnnotationConsume, "consumed"))
	u.waitCondition(ctx, "consumed", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonCapacityBookingConsumed)
	// failed: no room, no retry.
	u.request(ctx, "failed", provv1.ClassCheckCapacity, "small", 1000, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
	u.waitCondition(ctx, "failed", provv1.ConditionFailed, metav1.ConditionTrue, provv1.ReasonCapacityIsNotFound)
	// retrying: no room, retried with backoff.
	u.request(ctx, "retrying", provv1.ClassCheckCapacity, "small", 1000, nil)
	u.waitCondition(ctx, "retrying", provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound)
	// no-template: not Accepted while its template is missing.
	u.request(ctx, "no-template", provv1.ClassCheckCapacity, "missing", 1, nil)
	u.waitCondition(ctx, "no-template", provv1.ConditionAccepted, metav1.ConditionFalse, provisioning.ReasonPodTemplateNotFound)
	// scaled: an atomic scale-up, Provisioned on a node it added; its pod
	// comes after the upgrade.
	u.request(ctx, "scaled", u.atomic, "big", 1, nil)
	u.waitCondition(ctx, "scaled", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsProvisioned)
	u.f.CreatePod(ctx, kwokPod("scaled-0", u.ns).Requests("cpu", "6", "memory", "64Mi").NodeSelector(nodegroups.LabelNodeGroup, "general").
		Annotation(provv1.AnnotationConsume, "scaled").Gated(gate))
	// revoked: its booked node is deleted.
	u.request(ctx, "revoked", provv1.ClassCheckCapacity, "pinned", 1, nil)
	u.waitCondition(ctx, "revoked", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound)
	gomega.Expect(c.CoreV1().Nodes().Delete(ctx, u.doomed, metav1.DeleteOptions{})).To(gomega.Succeed())
	u.waitCondition(ctx, "revoked", provv1.ConditionCapacityRevoked, metav1.ConditionTrue, provisioning.ReasonCapacityRevoked)

	ginkgo.By("a gated pod whose placement will be narrowed, and one that will own the held reservation")
	u.f.CreatePod(ctx, kwokPod("narrowed", u.ns).Requests("cpu", "500m", "memory", "64Mi").Gated(gate).
		RequiredTerms(wrappers.Term(wrappers.In(v1.LabelTopologyZone, nodes.Zones[0], nodes.Zones[1]))))
	u.f.CreatePod(ctx, kwokPod("held-owner", u.ns).Label("app", "held").Requests("cpu", "500m", "memory", "64Mi").Gated(gate))
}

// request creates a ProvisioningRequest, deleted when the spec ends.
func (u *upgrader) request(ctx context.Context, name, class, template string, count int, params map[string]provv1.Parameter) {
	ginkgo.GinkgoHelper()
	prs := u.f.Gantry.AutoscalingXV1().ProvisioningRequests(u.ns)
	_, err := prs.Create(ctx, wrappers.MakeProvisioningRequest(name, u.ns, class).PodSet(template, int32(count)).Parameters(params).Obj(), metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx context.Context) { _ = prs.Delete(ctx, name, metav1.DeleteOptions{}) })
}

func (u *upgrader) waitCondition(ctx context.Context, name, typ string, status metav1.ConditionStatus, reason string) {
	ginkgo.GinkgoHelper()
	utilgomega.Must(util.WaitForProvisioningRequestCondition(ctx, util.LongTimeout, u.f.Gantry, u.ns, name, typ, status, reason))
}

// expectGoverned creates a pod and checks the namespace's policy labelled
// it, then that a forbidden one is rejected; both are deleted.
func (u *upgrader) expectGoverned(ctx context.Context, name string) {
	ginkgo.GinkgoHelper()
	pods := u.f.Client.CoreV1().Pods(u.ns)
	p, err := pods.Create(ctx, kwokPod(name, u.ns).Requests("cpu", "100m").Gated(gate).Obj(), metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(p.Labels).To(gomega.HaveKeyWithValue(governedLabel, "true"), "the MetadataPolicy did not label pod %s", name)
	gomega.Expect(pods.Delete(ctx, name, *metav1.NewDeleteOptions(0))).To(gomega.Succeed())
	_, err = pods.Create(ctx, kwokPod(name+"-forbidden", u.ns).Label(forbiddenLabel, "true").Requests("cpu", "100m").Obj(), metav1.CreateOptions{})
	gomega.Expect(err).To(gomega.HaveOccurred(), "the MetadataPolicy did not reject a forbidden pod")
	gomega.Expect(err.Error()).To(gomega.ContainSubstring("governing"))
}

// midUpgrade: the earlier release's kube-scheduler (or gantry-scheduler),
// kube-controller-manager, gantry-provisioner and gantry-webhook serve
// against this release's kube-apiserver, as the skew policy allows.
func (u *upgrader) midUpgrade(ctx context.Context) {
	ginkgo.GinkgoHelper()
	ginkgo.By("mid-upgrade (" + u.components(ctx) + "): the earlier release's add-ons on this release's kube-apiserver")
	u.expectGoverned(ctx, "mid-policy")
	u.f.CreatePod(ctx, kwokPod("mid-0", u.ns).Requests("cpu", "500m", "memory", "64Mi"))
	u.f.WaitScheduled(ctx, util.LongTimeout, "mid-0")
	u.request(ctx, "mid", provv1.ClassCheckCapacity, "small", 1, nil)
	u.waitCondition(ctx, "mid", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound)
	u.deleteRequest(ctx, "mid")
	gomega.Expect(u.f.Client.CoreV1().Pods(u.ns).Delete(ctx, "mid-0", *metav1.NewDeleteOptions(0))).To(gomega.Succeed())
}

func (u *upgrader) deleteRequest(ctx context.Context, name string) {
	ginkgo.GinkgoHelper()
	prs := u.f.Gantry.AutoscalingXV1().ProvisioningRequests(u.ns)
	gomega.Expect(prs.Delete(ctx, name, metav1.DeleteOptions{})).To(gomega.Succeed())
	framework.Eventually(ctx, func() bool {
		_, err := prs.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}).Should(gomega.BeTrue(), "request %s still there (its finalizer releases the booking)", name)
}

// ungate removes a pod's gates, with mutate applied in the same update.
func (u *upgrader) ungate(ctx context.Context, name string, mutate func(*wrappers.PodWrapper)) error {
	pods := u.f.Client.CoreV1().Pods(u.ns)
	live, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	p := &wrappers.PodWrapper{Pod: *live}
	p.Spec.SchedulingGates = nil
	if mutate != nil {
		mutate(p)
	}
	_, err = pods.Update(ctx, p.Obj(), metav1.UpdateOptions{})
	return err
}

// afterUpgrade: every part of this release works on what the earlier one
// left, and on new objects.
func (u *upgrader) afterUpgrade(ctx context.Context) {
	ginkgo.GinkgoHelper()
	ginkgo.By("after the upgrade (" + u.components(ctx) + ")")
	u.expectGoverned(ctx, "after-policy")

	ginkgo.By("the held reservation's owner is placed in it")
	gomega.Expect(u.ungate(ctx, "held-owner", nil)).To(gomega.Succeed())
	framework.Eventually(ctx, func() []v1.ObjectReference {
		r, err := u.f.Gantry.SchedulingV1alpha1().Reservations().Get(ctx, u.f.ReservationName("held"), metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return r.Status.CurrentOwners
	}).Should(gomega.ContainElement(gomega.HaveField("Name", "held-owner")), "held-owner not placed in the reservation kept through the upgrade")

	ginkgo.By("the booked request's second pod comes into its booking, which ends as consumed")
	gomega.Expect(u.ungate(ctx, "booked-1", nil)).To(gomega.Succeed())
	u.f.WaitScheduled(ctx, util.LongTimeout, "booked-1")
	u.waitCondition(ctx, "booked", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonCapacityBookingConsumed)

	ginkgo.By("the scaled-up request's pod lands on the node added for it before the upgrade")
	gomega.Expect(u.ungate(ctx, "scaled-0", nil)).To(gomega.Succeed())
	p := u.f.WaitScheduled(ctx, util.LongTimeout, "scaled-0")
	n, err := u.f.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(n.Labels).To(gomega.HaveKeyWithValue(nodegroups.LabelNodeGroup, "general"))

	if framework.TestContext.ControlPlane == cluster.ControlPlaneGantry {
		ginkgo.By("a gated pod of the earlier release is narrowed and ungated in one update")
		gomega.Expect(u.ungate(ctx, "narrowed", func(p *wrappers.PodWrapper) {
			p.Spec.Affinity = nil
			p.RequiredTerms(wrappers.Term(wrappers.In(v1.LabelTopologyZone, nodes.Zones[0])))
		})).To(gomega.Succeed(), "kube-apiserver refused narrowing a gated pod made before the upgrade")
		p := u.f.WaitScheduled(ctx, util.LongTimeout, "narrowed")
		n, err := u.f.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(n.Labels).To(gomega.HaveKeyWithValue(v1.LabelTopologyZone, nodes.Zones[0]))
	}

	ginkgo.By("a new request is booked and released")
	u.request(ctx, "after", provv1.ClassCheckCapacity, "small", 1, nil)
	u.waitCondition(ctx, "after", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound)
	u.deleteRequest(ctx, "after")

	ginkgo.By("the requests the upgrade left alone are as they were")
	for name, want := range map[string]string{
		"failed": provv1.ConditionFailed, "revoked": provv1.ConditionCapacityRevoked, "consumed": provv1.ConditionBookingExpired,
	} {
		pr, err := u.f.Gantry.AutoscalingXV1().ProvisioningRequests(u.ns).Get(ctx, name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(meta.IsStatusConditionTrue(pr.Status.Conditions, want)).To(gomega.BeTrue(), "request %s: %v", name, pr.Status.Conditions)
	}
}

// kwokPod is a pod for the kwok nodes. The suite does not taint the real
// nodes as other suites do (framework.WithFakeNodesOnly): the upgraded
// add-ons' pods must still be placed on the control-plane node.
func kwokPod(name, namespace string) *wrappers.PodWrapper {
	return wrappers.MakePod(name, namespace).NodeSelector("type", "kwok")
}
