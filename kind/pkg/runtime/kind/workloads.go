package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	applypkg "github.com/gantry-dev/gantry/internal/apply"
	"github.com/gantry-dev/gantry/internal/kustomize"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// workloadsNamespace is where Gantry's workloads run.
const workloadsNamespace = "gantry-system"

// FieldManager owns the fields the runtime applies.
const FieldManager = "gantry-cluster"

// workload is a Deployment of the addons, by component name.
type workload struct{ component, deployment string }

// workloads are the Deployments of kind/config/addons; the stock control
// plane's (kind/config/managed-addons) add Gantry's scheduler and webhook.
func (r *Runtime) workloads() []workload {
	out := []workload{{"gantry-provisioner", "gantry-provisioner"}, {"kwok-controller", "kwok-controller"}}
	if r.plane == cluster.ControlPlaneStock {
		out = append(out, workload{"gantry-scheduler", "gantry-scheduler"}, workload{"gantry-webhook", "gantry-webhook"})
	}
	return out
}

// Workloads implements cluster.WorkloadInstaller.
func (r *Runtime) Workloads() []string {
	var out []string
	for _, w := range r.workloads() {
		out = append(out, w.component)
	}
	return out
}

// InstallWorkloads implements cluster.WorkloadInstaller: kind/config/addons
// with the images preloaded in the node image and the cluster's
// configuration (the scheduler's profiles gantry-provisioner simulates
// with, the kwok node groups it scales), applied server-side; it returns
// when both Deployments are available.
func (r *Runtime) InstallWorkloads(ctx context.Context, cfg *rest.Config) (string, error) {
	objs, err := r.RenderWorkloads()
	if err != nil {
		return "", err
	}
	objs = append(objs, kubeProxyOffFakeNodes())
	if err := apply(ctx, cfg, objs); err != nil {
		return "", err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	var summary []string
	for _, w := range r.workloads() {
		d, err := r.waitDeployment(ctx, client, workloadsNamespace, w.deployment)
		if err != nil {
			return "", &workloadError{component: w.component, err: err}
		}
		summary = append(summary, fmt.Sprintf("%s %d/%d", w.component, d.Status.AvailableReplicas, *d.Spec.Replicas))
	}
	return strings.Join(summary, ", ") + " available", nil
}

// waitDeployment waits until a Deployment's pods are all updated and
// available.
func (r *Runtime) waitDeployment(ctx context.Context, client kubernetes.Interface, namespace, name string) (*appsv1.Deployment, error) {
	var d *appsv1.Deployment
	err := wait.PollUntilContextTimeout(ctx, time.Second, r.timeout(), true, func(ctx context.Context) (bool, error) {
		var err error
		d, err = client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return d.Status.ObservedGeneration == d.Generation && d.Spec.Replicas != nil &&
			d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.AvailableReplicas == *d.Spec.Replicas, nil
	})
	if err != nil {
		return nil, fmt.Errorf("Deployment %s/%s not available within %s", namespace, name, r.timeout())
	}
	return d, nil
}

// workloadError names the component whose Deployment failed, so that Up
// shows its log.
type workloadError struct {
	component string
	err       error
}

func (e *workloadError) Error() string     { return e.component + ": " + e.err.Error() }
func (e *workloadError) Unwrap() error     { return e.err }
func (e *workloadError) Component() string { return e.component }

// kubeProxyOffFakeNodes keeps kubeadm's kube-proxy DaemonSet, which
// tolerates every taint, off the kwok nodes (labelled type=kwok, both the
// suites' and the provisioner's): kwok would play its pods there, and
// specs that wait for an idle kwok node would never see one.
func kubeProxyOffFakeNodes() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": "kube-proxy", "namespace": metav1.NamespaceSystem},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"affinity": map[string]any{"nodeAffinity": map[string]any{
				"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
					"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{
						map[string]any{"key": "type", "operator": "NotIn", "values": []any{"kwok"}},
					}}},
				},
			}},
		}}},
	}}
}

// RenderWorkloads builds, as `kubectl kustomize` would, a kustomization
// made for this cluster on top of kind/config/addons (Gantry's control
// plane: the provisioner simulates with the cluster's scheduler
// configuration) or kind/config/managed-addons (the stock control plane:
// the overlay's second scheduler and its configuration).
func (r *Runtime) RenderWorkloads() ([]*unstructured.Unstructured, error) {
	kwokVersion, err := requiredVersion(filepath.Join(r.o.Root, "hack", "tools", "go.mod"), "sigs.k8s.io/kwok")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"node-groups.yaml": []byte(cluster.NodeGroups)}
	addons := "addons"
	images := []string{"gantry-provisioner"}
	schedulerConfigMap := ""
	if r.plane == cluster.ControlPlaneStock {
		addons = "managed-addons"
		images = append(images, "gantry-webhook", "kube-scheduler")
	} else {
		data, err := os.ReadFile(r.o.SchedulerConfig)
		if err != nil {
			return nil, fmt.Errorf("scheduler configuration: %w", err)
		}
		files["config.yaml"] = data
		schedulerConfigMap = fmt.Sprintf("- {name: kube-scheduler-config, namespace: %s, behavior: replace, files: [config.yaml]}\n", workloadsNamespace)
	}
	var b strings.Builder
	b.WriteString("images:\n")
	for _, name := range images {
		fmt.Fprintf(&b, "- {name: %s/%s, newTag: %s}\n", DefaultImageRepository, name, r.kubeVersion)
	}
	fmt.Fprintf(&b, "- {name: kwok, newName: %s/kwok, newTag: %s}\n", DefaultImageRepository, kwokVersion)
	fmt.Fprintf(&b, `generatorOptions: {disableNameSuffixHash: true}
configMapGenerator:
%s- {name: gantry-provisioner-node-groups, namespace: %s, files: [node-groups.yaml]}
patches:
- target: {kind: Deployment, name: gantry-provisioner}
  patch: |-
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: --scale-down-unneeded-time=%s}
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: --scale-down-interval=2s}
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: --initial-node-group-backoff-duration=%s}
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: --max-node-group-backoff-duration=%s}
`, schedulerConfigMap, workloadsNamespace, cluster.ScaleDownUnneededTime, cluster.NodeGroupBackoff, cluster.NodeGroupBackoff)
	for _, a := range r.o.ProvisionerArgs {
		flag, err := cluster.ProvisionerFlag(a)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "    - {op: add, path: /spec/template/spec/containers/0/args/-, value: %q}\n", flag)
	}
	dir := filepath.Join(r.dir(), "workloads")
	if r.o.GangScheduling {
		components := []string{filepath.Join(append([]string{r.o.Root}, cluster.GangRequestsComponent...)...)}
		if r.plane == cluster.ControlPlaneStock {
			components = append(components, filepath.Join(append([]string{r.o.Root}, cluster.GangSchedulingComponent...)...))
		}
		b.WriteString("components:\n")
		for _, c := range components {
			rel, err := filepath.Rel(dir, c)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "- %s\n", rel)
		}
	}
	return kustomize.BuildOver(dir, filepath.Join(r.o.Root, "kind", "config", addons), b.String(), files)
}

// requiredVersion reads the version of module from a go.mod's require lines.
func requiredVersion(gomod, module string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(v\S+)`)
	m := re.FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("%s requires no %s", gomod, module)
	}
	return string(m[1]), nil
}

// apply applies objs server-side, in order, as FieldManager, taking over
// fields another manager set (the runtime owns these objects).
func apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	a, err := applypkg.New(cfg, FieldManager)
	if err != nil {
		return err
	}
	return a.Apply(ctx, objs, false)
}
