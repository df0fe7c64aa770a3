//go:build soak

package soak

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/internal/repo"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/scheduler/profiles"
	"github.com/gantry-dev/gantry/test/faultproxy"
	"github.com/gantry-dev/gantry/test/util"
)

// injector is what the API fault does with a fault proxy: the local
// shape's, in this process, or the stock shape's, on the control-plane
// node.
type injector interface {
	add(ctx context.Context, r faultproxy.Rule) error
	clear(ctx context.Context) error
	injected(ctx context.Context) (int, error)
	agents(ctx context.Context) (map[string]int, error)
}

// localProxy is a proxy of this process.
type localProxy struct{ *faultproxy.Proxy }

func (p localProxy) add(_ context.Context, r faultproxy.Rule) error { p.Add(r); return nil }
func (p localProxy) clear(context.Context) error                    { p.Clear(); return nil }
func (p localProxy) injected(context.Context) (int, error)          { return p.Injected(), nil }
func (p localProxy) agents(context.Context) (map[string]int, error) { return p.Agents(), nil }

// nodeProxy is cmd/faultproxy on the control-plane node.
type nodeProxy struct{ faultproxy.Remote }

func (p nodeProxy) add(ctx context.Context, r faultproxy.Rule) error   { return p.Add(ctx, r) }
func (p nodeProxy) clear(ctx context.Context) error                    { return p.Clear(ctx) }
func (p nodeProxy) injected(ctx context.Context) (int, error)          { return p.Injected(ctx) }
func (p nodeProxy) agents(ctx context.Context) (map[string]int, error) { return p.Agents(ctx) }

// gantryNamespace is where the managed overlay runs every Gantry add-on
// (gantry-scheduler, gantry-provisioner, gantry-webhook).
const gantryNamespace = profiles.SecondSchedulerNamespace

// Where the stock shape's proxy runs on the control-plane node.
const (
	nodeProxyPort    = 16443
	nodeProxyControl = "127.0.0.1:16444"
	nodeProxyPath    = "/usr/local/bin/gantry-faultproxy"
	nodeProxyLog     = "/var/log/gantry-faultproxy.log"
)

// routed are the Deployments the stock shape sends through the proxy, by
// the container that is a client of kube-apiserver: Gantry's add-ons and
// Kueue's manager, all on the control-plane node (kind/config,
// kind/pkg/runtime/kind).
var routed = []struct{ namespace, name, container string }{
	{gantryNamespace, profiles.SecondSchedulerName, "gantry-scheduler"},
	{gantryNamespace, provisionerComponent, "provisioner"},
	{gantryNamespace, webhookComponent, "webhook"},
	{kueue.Namespace, kueue.Deployment, "manager"},
}

// stockAPIFaultTargets are the stock shape's components the API fault
// targets, by the product of their User-Agent.
var stockAPIFaultTargets = []string{"kube-scheduler", provisionerComponent, webhookComponent, kueue.Component}

// routeOnNode starts cmd/faultproxy (built by `make soak` into
// _output/bin/faultproxy) on the control-plane node, between in-cluster
// clients and kube-apiserver, and points routed at it: their
// KUBERNETES_SERVICE_HOST and _PORT, which in-cluster clients read, name
// the proxy on the node's address, whose certificate the cluster's CA
// signs. It waits until the Deployments have rolled and each of
// stockAPIFaultTargets has been seen at the proxy, and routes them back
// when the spec ends. nil when the runtime runs no control-plane node.
func routeOnNode(ctx context.Context, c *cluster.Cluster) injector {
	ginkgo.GinkgoHelper()
	cmd, ok := c.Runtime().(cluster.ControlPlaneCommander)
	if !ok {
		ginkgo.GinkgoWriter.Printf("runtime %s runs no control-plane node: no fault proxy, no %q faults\n", c.Runtime().Name(), apiFault)
		return nil
	}
	root, err := repo.Root()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	binary, err := os.ReadFile(filepath.Join(root, "_output", "bin", "faultproxy"))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "the fault proxy's binary: `make soak` builds it")
	_, err = cmd.ControlPlaneCommand(ctx, bytes.NewReader(binary), "sh", "-c", "cat > "+nodeProxyPath+" && chmod 0755 "+nodeProxyPath)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ip := controlPlaneIP(ctx)
	listen := net.JoinHostPort(ip, strconv.Itoa(nodeProxyPort))
	_, err = cmd.ControlPlaneCommand(ctx, nil, "sh", "-c", fmt.Sprintf("setsid %s --listen=%s --ip=%s --control=%s >%s 2>&1 </dev/null &",
		nodeProxyPath, listen, ip, nodeProxyControl, nodeProxyLog))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	proxy := nodeProxy{faultproxy.Remote{Do: func(ctx context.Context, method, path string, body []byte) ([]byte, error) {
		args := []string{"-sS", "--fail-with-body", "-X", method, "http://" + nodeProxyControl + path}
		var stdin io.Reader
		if body != nil {
			args = append(args, "--data-binary", "@-")
			stdin = bytes.NewReader(body)
		}
		return cmd.ControlPlaneCommand(ctx, stdin, "curl", args...)
	}}}
	ginkgo.DeferCleanup(func(ctx context.Context) {
		routeDeployments(ctx, "", "")
		_, _ = cmd.ControlPlaneCommand(ctx, nil, "pkill", "-f", nodeProxyPath)
	})
	gomega.Eventually(ctx, func() error { _, err := proxy.agents(ctx); return err }).WithTimeout(30*time.Second).WithPolling(time.Second).
		Should(gomega.Succeed(), "the fault proxy on the control-plane node does not answer (its log: %s there)", nodeProxyLog)
	routeDeployments(ctx, ip, strconv.Itoa(nodeProxyPort))
	gomega.Expect(kueue.WaitReady(ctx, framework.TestContext.Config, kueueDown, nil)).To(gomega.Succeed())
	ginkgo.GinkgoWriter.Printf("fault proxy at %s on the control-plane node; routed through it: %v\n", listen, routed)
	waitSeen(ctx, proxy, stockAPIFaultTargets)
	return proxy
}

// controlPlaneIP is the control-plane node's InternalIP.
func controlPlaneIP(ctx context.Context) string {
	ginkgo.GinkgoHelper()
	nodes, err := framework.TestContext.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/control-plane"})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				return a.Address
			}
		}
	}
	ginkgo.Fail("the cluster has no control-plane node with an InternalIP")
	return ""
}

// routeDeployments sets (host "": removes) KUBERNETES_SERVICE_HOST and
// _PORT of routed's containers, and waits until each Deployment has
// rolled out. Their new pods tolerate framework.RealNodeTaint, which the
// suite puts on the control-plane node they are pinned to.
func routeDeployments(ctx context.Context, host, port string) {
	ginkgo.GinkgoHelper()
	c := framework.TestContext.Client.AppsV1()
	for _, d := range routed {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := c.Deployments(d.namespace).Get(ctx, d.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			spec := &got.Spec.Template.Spec
			i := slices.IndexFunc(spec.Containers, func(c v1.Container) bool { return c.Name == d.container })
			if i < 0 {
				return fmt.Errorf("it has no container %s", d.container)
			}
			env := slices.DeleteFunc(spec.Containers[i].Env, func(e v1.EnvVar) bool {
				return e.Name == "KUBERNETES_SERVICE_HOST" || e.Name == "KUBERNETES_SERVICE_PORT"
			})
			if host != "" {
				env = append(env, v1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host}, v1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
			}
			spec.Containers[i].Env = env
			tolerate := v1.Toleration{Key: framework.RealNodeTaint.Key, Operator: v1.TolerationOpExists, Effect: framework.RealNodeTaint.Effect}
			if !slices.Contains(spec.Tolerations, tolerate) {
				spec.Tolerations = append(spec.Tolerations, tolerate)
			}
			// One pod at a time is replaced, none added first: the
			// control-plane node has no room for a surge (Kueue's manager
			// asks for much of it).
			got.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			}}
			_, err = c.Deployments(d.namespace).Update(ctx, got, metav1.UpdateOptions{})
			return err
		})
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "routing Deployment %s/%s", d.namespace, d.name)
	}
	for _, d := range routed {
		gomega.Expect(util.PollSlowly(ctx, 3*time.Minute, "Deployment "+d.namespace+"/"+d.name+" rolled out", func(ctx context.Context) (bool, error) {
			got, err := c.Deployments(d.namespace).Get(ctx, d.name, metav1.GetOptions{})
			if err != nil || got.Spec.Replicas == nil {
				return false, nil
			}
			n, s := *got.Spec.Replicas, got.Status
			return s.ObservedGeneration >= got.Generation && s.UpdatedReplicas == n && s.AvailableReplicas == n && s.Replicas == n, nil
		})).To(gomega.Succeed())
	}
}

// waitSeen waits until each of targets has been seen at the proxy.
func waitSeen(ctx context.Context, proxy injector, targets []string) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(ctx, func(g gomega.Gomega) {
		seen, err := proxy.agents(ctx)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		for _, t := range targets {
			g.Expect(seen).To(gomega.HaveKey(t), "no request of %s has reached the fault proxy (seen: %s)", t, agentList(seen))
		}
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(gomega.Succeed())
}

func agentList(m map[string]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(out, ", ")
}
