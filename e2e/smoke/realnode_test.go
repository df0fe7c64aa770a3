package smoke

import (
	"encoding/json"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
)

var _ = framework.Describe("Smoke on real nodes", ginkgo.Label(framework.LabelSmoke), func() {
	f := framework.NewFramework("smoke-real")

	ginkgo.It("runs a real container on a worker, reachable from the control plane across nodes", func(ctx ginkgo.SpecContext) {
		list, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!" + nodes.ManagedLabel + ",!node-role.kubernetes.io/control-plane"})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if len(list.Items) == 0 {
			ginkgo.Skip("the cluster has no real worker node (the local runtime has kwok nodes only; run with --runtime=kind)")
		}
		worker := list.Items[0]

		ginkgo.By("finding the etcd image among the images preloaded on " + worker.Name)
		image := ""
		for _, img := range worker.Status.Images {
			for _, name := range img.Names {
				if strings.Contains(name, "/etcd:") && !strings.Contains(name, "@") {
					image = name
				}
			}
		}
		gomega.Expect(image).NotTo(gomega.BeEmpty(), "no etcd image on node %s: %v", worker.Name, worker.Status.Images)

		ginkgo.By("running etcd from " + image + " on " + worker.Name)
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: f.Namespace},
			Spec: v1.PodSpec{
				NodeName: worker.Name,
				Containers: []v1.Container{{
					Name:  "etcd",
					Image: image,
					// Never pull: the node has it, and no registry serves it.
					ImagePullPolicy: v1.PullNever,
					Command: []string{"etcd", "--name=smoke", "--data-dir=/tmp/etcd",
						"--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://127.0.0.1:2379",
						"--listen-peer-urls=http://127.0.0.1:2380"},
					Ports: []v1.ContainerPort{{Name: "client", ContainerPort: 2379}},
					ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{
						HTTPGet: &v1.HTTPGetAction{Path: "/health", Port: intstr.FromString("client")},
					}, PeriodSeconds: 1},
					VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/tmp"}},
				}},
				Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
			},
		}
		_, err = f.Client.CoreV1().Pods(f.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())

		ginkgo.By("waiting for kubelet's readiness probe to pass")
		framework.Eventually(ctx, func(g gomega.Gomega) {
			p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, "etcd", metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(p.Status.PodIP).NotTo(gomega.BeEmpty())
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || (c.Type == v1.PodReady && c.Status == v1.ConditionTrue)
			}
			g.Expect(ready).To(gomega.BeTrue(), "pod not Ready: %+v", p.Status)
		}).Should(gomega.Succeed())

		ginkgo.By("reading the container's log")
		logs, err := f.Client.CoreV1().Pods(f.Namespace).GetLogs("etcd", &v1.PodLogOptions{}).DoRaw(ctx)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(string(logs)).To(gomega.ContainSubstring("serving client traffic"), "etcd's log")

		ginkgo.By("calling the pod from kube-apiserver on the control-plane node, through the pod network")
		body, err := f.Client.CoreV1().RESTClient().Get().Namespace(f.Namespace).Resource("pods").
			Name("etcd:2379").SubResource("proxy").Suffix("version").DoRaw(ctx)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		var version struct {
			Server string `json:"etcdserver"`
		}
		gomega.Expect(json.Unmarshal(body, &version)).To(gomega.Succeed(), "etcd's /version: %s", body)
		gomega.Expect(image).To(gomega.ContainSubstring(":"+version.Server), "etcd %s answered, from image %s", version.Server, image)
	})
})
