package webhook

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/admission/qos"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/internal/kustomize"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// The shipped manifests' names (admission/config).
const (
	shippedName      = "gantry-webhook"
	shippedNamespace = "gantry-system"
	// The Deployment's container ports.
	webhookPort, metricsPort, healthPort = 9443, 8443, 8081
)

// deployWebhook deploys admission/config as shipped, with the image the
// cluster's nodes have and kept off the kwok nodes (kwok would only play
// its pods), and reaches each of its two pods through port-forwards. The
// webhook configurations are the shipped ones with the specs' namespace
// selector (see shippedConfigs), created before the Deployment, which
// injects their CA. On a stock control plane the webhook is the one
// config/overlays/managed installed with the cluster.
func deployWebhook(ctx context.Context, dir string) error {
	tc := framework.TestContext
	if os.Getenv(ownSecretsEnv) == "true" {
		return fmt.Errorf("%s=true runs replicas as processes, with the local runtime only", ownSecretsEnv)
	}
	configName, certSecretNamespace = shippedName, shippedNamespace
	if tc.ControlPlane == cluster.ControlPlaneStock {
		// config/overlays/managed installed the webhook with the cluster,
		// as on a managed cluster: the specs test that one, and leave it.
		ginkgo.By("testing the gantry-webhook of config/overlays/managed")
	} else if err := applyShipped(ctx, dir); err != nil {
		return err
	}

	pods, err := waitServing(ctx)
	if err != nil {
		return err
	}
	framework.BeforeClusterRemoval(func(ctx context.Context) { savePodLogs(ctx, pods, dir) })
	for _, p := range pods {
		pf, err := framework.PortForward(ctx, shippedNamespace, p.Name, webhookPort, metricsPort, healthPort)
		if err != nil {
			return err
		}
		ginkgo.DeferCleanup(pf.Close)
		replicas = append(replicas, &replica{
			name: "pod " + p.Name, port: pf.Local[0], metricsPort: pf.Local[1], healthPort: pf.Local[2],
			serverName: shippedName + "." + shippedNamespace + ".svc", secret: certSecretName,
			log: filepath.Join(dir, p.Name+".log"),
		})
	}
	return nil
}

// applyShipped applies admission/config (see renderShipped), the webhook
// configurations first, and removes it after the suite.
func applyShipped(ctx context.Context, dir string) error {
	tc := framework.TestContext
	image, err := framework.Image("gantry-webhook")
	if err != nil {
		return err
	}
	objs, err := renderShipped(filepath.Join(dir, "deploy"), image)
	if err != nil {
		return err
	}
	var rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GroupVersionKind().Group != admissionregistrationv1.GroupName {
			rest = append(rest, o)
		}
	}
	// The namespace comes with config/base; the kind runtime has made it.
	// Where it is missing, the suite makes it and removes it again.
	_, err = tc.Client.CoreV1().Namespaces().Get(ctx, shippedNamespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName(shippedNamespace)
		rest = append([]*unstructured.Unstructured{ns}, rest...)
	} else if err != nil {
		return err
	}

	if err := createConfigs(ctx, ""); err != nil {
		return err
	}
	applier, err := framework.NewApplier()
	if err != nil {
		return err
	}
	if err := applier.Apply(ctx, rest); err != nil {
		return err
	}
	ginkgo.DeferCleanup(func(ctx context.Context) error {
		if tc.OwnCluster {
			return nil
		}
		return applier.Delete(ctx, rest)
	})
	return nil
}

// waitServing waits until the Deployment's two pods are ready, the
// Service's endpoints list both as ready (kube-proxy sends nothing to a
// Service before), and a pod create reviewed through the Service comes
// back annotated; it returns the pods.
func waitServing(ctx context.Context) ([]v1.Pod, error) {
	c := framework.TestContext.Client
	var pods []v1.Pod
	selector := "app.kubernetes.io/name=" + shippedName
	err := util.Poll(ctx, util.LongTimeout, "the gantry-webhook Deployment's 2 pods ready", func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(shippedNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		var states []string
		for _, p := range list.Items {
			ready := p.DeletionTimestamp == nil && slices.ContainsFunc(p.Status.Conditions, func(c v1.PodCondition) bool {
				return c.Type == v1.PodReady && c.Status == v1.ConditionTrue
			})
			states = append(states, fmt.Sprintf("%s %s ready=%t", p.Name, p.Status.Phase, ready))
			if ready {
				pods = append(pods, p)
			}
		}
		return len(pods) == 2, fmt.Errorf("pods: %s", strings.Join(states, ", "))
	})
	if err != nil {
		return nil, err
	}
	err = util.Poll(ctx, util.LongTimeout, "the gantry-webhook Service's 2 endpoints ready", func(ctx context.Context) (bool, error) {
		list, err := c.DiscoveryV1().EndpointSlices(shippedNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + shippedName})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					ready++
				}
			}
		}
		return ready == 2, fmt.Errorf("%d ready endpoints", ready)
	})
	if err != nil {
		return nil, err
	}
	err = util.Poll(ctx, util.LongTimeout, "a pod create reviewed through the gantry-webhook Service", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, wrappers.MakePod("probe", metav1.NamespaceDefault).Obj(),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		return p.Annotations[qos.Annotation] != "", fmt.Errorf("a pod came back without %s", qos.Annotation)
	})
	return pods, err
}

// renderShipped renders admission/config through a kustomization in dir
// that sets image, keeps the pods off the kwok nodes, the suite's and
// gantry-provisioner's alike (both labelled type=kwok), and lets them on
// the real nodes, which the suite keeps the specs' pods off
// (framework.WithFakeNodesOnly).
func renderShipped(dir, image string) ([]*unstructured.Unstructured, error) {
	i := strings.LastIndex(image, ":")
	if i < 0 {
		return nil, fmt.Errorf("image %q has no tag", image)
	}
	kustomization := fmt.Sprintf(`images:
- {name: gantry-webhook, newName: %s, newTag: %s}
patches:
- target: {kind: Deployment, name: %s}
  patch: |-
    - op: add
      path: /spec/template/spec/affinity
      value:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: type, operator: NotIn, values: [kwok]}
    - op: add
      path: /spec/template/spec/tolerations
      value: [{key: %s, operator: Exists, effect: %s}]
`, image[:i], image[i+1:], shippedName, framework.RealNodeTaint.Key, framework.RealNodeTaint.Effect)
	return kustomize.BuildOver(dir, filepath.Join(framework.TestContext.Root, "admission", "config"), kustomization, nil)
}

// savePodLogs writes the log of each pod, and the events of their
// namespace, into dir.
func savePodLogs(ctx context.Context, pods []v1.Pod, dir string) {
	events, err := framework.TestContext.Client.CoreV1().Events(shippedNamespace).List(ctx, metav1.ListOptions{})
	if err == nil {
		framework.WriteJSON(filepath.Join(dir, shippedNamespace+"-events.json"), events)
	} else {
		ginkgo.GinkgoWriter.Printf("listing the events of %s: %v\n", shippedNamespace, err)
	}
	for _, p := range pods {
		data, err := framework.TestContext.Client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &v1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			data = []byte("reading the log: " + err.Error())
		}
		if err := os.WriteFile(filepath.Join(dir, p.Name+".log"), data, 0o644); err != nil {
			ginkgo.GinkgoWriter.Printf("writing the log of %s: %v\n", p.Name, err)
		}
	}
}
