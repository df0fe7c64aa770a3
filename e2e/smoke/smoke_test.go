package smoke

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups/kwok"
	"github.com/gantry-dev/gantry/crds/install"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// gantryVersion is the shape hack/build.sh stamps: the upstream release, then
// build metadata naming Gantry and its commit.
var gantryVersion = regexp.MustCompile(`^v1\.\d+\.\d+\+gantry\.[0-9a-f]{12}(\.[a-z]+)*$`)

var _ = framework.Describe("Smoke", ginkgo.Label(framework.LabelSmoke), func() {
	f := framework.NewFramework("smoke")

	ginkgo.It("serves /version with the Gantry marker and commit", func(ctx ginkgo.SpecContext) {
		v, err := f.Client.Discovery().ServerVersion()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if framework.TestContext.ControlPlane == cluster.ControlPlaneStock {
			ginkgo.By("checking the stock control plane runs upstream's kube-apiserver: a plain release")
			gomega.Expect(v.GitVersion).To(gomega.MatchRegexp(`^v1\.\d+\.\d+$`))
			return
		}
		gomega.Expect(v.GitVersion).To(gomega.MatchRegexp(gantryVersion.String()),
			"kube-apiserver is not a Gantry build (is KUBECONFIG pointing at another cluster?)")
		gomega.Expect(v.GitCommit).To(gomega.MatchRegexp(`^[0-9a-f]{40}$`))
		gomega.Expect(v.GitVersion).To(gomega.ContainSubstring(v.GitCommit[:12]), "marker and commit disagree")
	})

	ginkgo.It("runs a Deployment's pods on kwok nodes, placed by Gantry's kube-scheduler", func(ctx ginkgo.SpecContext) {
		const replicas = 3
		labels := map[string]string{"app": "smoke"}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: f.Namespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: v1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: v1.PodSpec{
						SchedulerName: framework.SchedulerName,
						// Only kwok plays this image: on a cluster with real
						// nodes too (kind), they must not get these pods.
						NodeSelector: map[string]string{nodes.ManagedLabel: "true"},
						Containers: []v1.Container{{
							Name:  "app",
							Image: "registry.k8s.io/pause:3.10",
							Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
								v1.ResourceCPU:    resource.MustParse("100m"),
								v1.ResourceMemory: resource.MustParse("64Mi"),
							}},
						}},
					},
				},
			},
		}
		_, err := f.Client.AppsV1().Deployments(f.Namespace).Create(ctx, dep, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())

		ginkgo.By("waiting for every replica to be Running")
		var pods []v1.Pod
		framework.Eventually(ctx, func(g gomega.Gomega) {
			list, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=smoke"})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(list.Items).To(gomega.HaveLen(replicas))
			for _, p := range list.Items {
				g.Expect(p.Status.Phase).To(gomega.Equal(v1.PodRunning), "pod %s", p.Name)
			}
			pods = list.Items
		}).Should(gomega.Succeed())

		ginkgo.By("checking the pods are on kwok nodes")
		for _, p := range pods {
			node, err := f.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s is bound to node %q", p.Name, p.Spec.NodeName)
			gomega.Expect(node.Annotations).To(gomega.HaveKeyWithValue(kwok.KwokAnnotation, "fake"), "node %s", node.Name)
		}

		ginkgo.By("checking every pod was scheduled by the leading " + framework.SchedulerComponent)
		holder, err := framework.SchedulerLeader(ctx)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(holder).NotTo(gomega.BeEmpty())
		// The lease holder is "<host>_<uuid>"; the scheduler reports its
		// events as "<profile>-<host>".
		leaderHost, _, _ := strings.Cut(holder, "_")
		leader := framework.SchedulerName + "-" + leaderHost
		legacyEvents := false
		for _, p := range pods {
			framework.Eventually(ctx, func(g gomega.Gomega) {
				events, err := f.Client.CoreV1().Events(f.Namespace).List(ctx, metav1.ListOptions{
					FieldSelector: fields.Set{"involvedObject.name": p.Name, "reason": "Scheduled"}.String(),
				})
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(events.Items).NotTo(gomega.BeEmpty(), "no Scheduled event for pod %s", p.Name)
				e := events.Items[0]
				g.Expect(e.ReportingController).To(gomega.Equal(framework.SchedulerName))
				if e.ReportingInstance == "" {
					// A legacy (core/v1) event names no instance: kube-scheduler
					// chooses the events API when it starts, and kubeadm starts it
					// before kube-apiserver serves events.k8s.io. Its metrics
					// below say which scheduler placed the pods.
					legacyEvents = true
					return
				}
				g.Expect(e.ReportingInstance).To(gomega.Equal(leader), "pod %s was scheduled by another scheduler than the lease holder", p.Name)
				g.Expect(e.Message).To(gomega.ContainSubstring(p.Spec.NodeName))
			}).Should(gomega.Succeed())
		}

		if framework.TestContext.Local == nil {
			ginkgo.By("skipping the scheduler build check: the cluster was not made by Gantry's cluster program")
			return
		}
		ginkgo.By("checking the lease holder is Gantry's kube-scheduler build")
		metrics, err := framework.TestContext.Local.ComponentMetrics(ctx, framework.SchedulerComponent)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		build := buildInfo(metrics)
		gomega.Expect(build).To(gomega.MatchRegexp(`git_version="`+strings.TrimSuffix(strings.TrimPrefix(gantryVersion.String(), "^"), "$")+`"`),
			"kube-scheduler's kubernetes_build_info is %q", build)
		if legacyEvents {
			ginkgo.By("checking, from its metrics, that this kube-scheduler placed the pods (its events name no instance)")
			placed := regexp.MustCompile(`(?m)^scheduler_schedule_attempts_total\{profile="` + framework.SchedulerName + `",result="scheduled"\} (\d+)$`).FindStringSubmatch(metrics)
			gomega.Expect(placed).NotTo(gomega.BeNil(), "kube-scheduler reports no scheduled attempts of profile %s", framework.SchedulerName)
			gomega.Expect(strconv.Atoi(placed[1])).To(gomega.BeNumerically(">=", replicas))
		}
	})

	ginkgo.It("leaves the pods that name the cluster's own scheduler to it", func(ctx ginkgo.SpecContext) {
		if framework.TestContext.ControlPlane != cluster.ControlPlaneStock {
			ginkgo.Skip("Gantry's kube-scheduler is the cluster's only scheduler")
		}
		p := wrappers.MakePod("stock", f.Namespace).SchedulerName(v1.DefaultSchedulerName).NodeSelector(nodes.ManagedLabel, "true").Obj()
		_, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, p, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.By("waiting for the cluster's scheduler to place it")
		framework.Eventually(ctx, func(g gomega.Gomega) {
			events, err := f.Client.CoreV1().Events(f.Namespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.name": p.Name, "reason": "Scheduled"}.String(),
			})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(events.Items).To(gomega.HaveLen(1), "Scheduled events of pod %s", p.Name)
			e := events.Items[0]
			g.Expect(e.ReportingController).To(gomega.Equal(v1.DefaultSchedulerName), "pod %s was placed by %s", p.Name, e.ReportingController)
			if e.ReportingInstance != "" {
				g.Expect(e.ReportingInstance).To(gomega.HavePrefix(v1.DefaultSchedulerName+"-"), "pod %s", p.Name)
			}
		}).Should(gomega.Succeed())
		got, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(got.Spec.SchedulerName).To(gomega.Equal(v1.DefaultSchedulerName), "something changed the pod's scheduler")
		gomega.Expect(got.Spec.NodeName).NotTo(gomega.BeEmpty())
	})

	ginkgo.It("serves every CRD under crds/", func(ctx ginkgo.SpecContext) {
		list, err := install.Load(framework.TestContext.Root + "/crds")
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if len(list) == 0 {
			ginkgo.Skip("Gantry ships no CRDs yet")
		}
		dyn, err := dynamic.NewForConfig(framework.TestContext.Config)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		for _, crd := range list {
			for _, v := range crd.Spec.Versions {
				if !v.Served {
					continue
				}
				gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
				framework.Eventually(ctx, func() error {
					_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
					return err
				}).Should(gomega.Succeed(), "listing %s", gvr)
			}
		}
	})
})

func buildInfo(metrics string) string {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "kubernetes_build_info{") {
			return line
		}
	}
	return ""
}
