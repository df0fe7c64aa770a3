// Package kueue installs Kueue, the job queueing controller, into a Gantry
// cluster as an optional add-on (`gantry-cluster up --kueue`): Kueue is the
// ProvisioningRequest client Gantry is tested against. Its manifests are
// the ones the Kueue release pinned by hack/tools/kueue ships, built from
// the Go module's config/default as Kueue's own install builds them, then
// narrowed to what a Gantry cluster needs:
//
//   - the batch/job integration alone, and only the webhooks of Jobs and of
//     Kueue's own kinds: a webhook for a kind Kueue does not manage here
//     (Pods, Deployments, StatefulSets) would send every such write in the
//     cluster through Kueue, with failurePolicy Fail;
//   - no visibility API (VisibilityOnDemand off, its APIService dropped),
//     which nothing in a Gantry cluster reads;
//   - Kueue's image as `make images` builds it from the same module.
//
// Kueue manages its webhook certificates itself (internalCertManagement),
// as on any cluster: it writes its CA into the webhook configurations and
// into the conversion webhooks of its CRDs.
package kueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/crds/install"
	applypkg "github.com/gantry-dev/gantry/internal/apply"
	"github.com/gantry-dev/gantry/internal/kustomize"
)

const (
	// Component is Kueue's manager among a cluster's components (logs,
	// restarts).
	Component = "kueue"
	// Namespace is where Kueue runs and keeps its certificate Secret.
	Namespace = "kueue-system"
	// Deployment runs Kueue's manager on a cluster with real nodes.
	Deployment = "kueue-controller-manager"
	// WebhookService fronts Kueue's webhooks; the webhook configurations
	// and the CRDs' conversion webhooks name it.
	WebhookService = "kueue-webhook-service"
	// CertSecret holds the webhook certificate Kueue makes for
	// WebhookService.
	CertSecret = "kueue-webhook-server-cert"
	// ConfigMap holds the manager's configuration under ConfigKey.
	ConfigMap = "kueue-manager-config"
	ConfigKey = "controller_manager_config.yaml"
	// FeatureGates is the manager's --feature-gates.
	FeatureGates = "VisibilityOnDemand=false"
	// FieldManager owns what the add-on applies.
	FieldManager = "gantry-cluster"

	module = "sigs.k8s.io/kueue"
)

// What a client of Kueue's API in a Gantry cluster names (the e2e suite,
// the benchmark): Kueue's types are another Kubernetes release's modules,
// so they go through the dynamic client.
const (
	// APIVersion is the version of Kueue's API they use.
	APIVersion = "v1beta2"
	// QueueNameLabel puts a Job in a LocalQueue.
	QueueNameLabel = "kueue.x-k8s.io/queue-name"
	// ProvisioningController is the controller of Kueue's
	// ProvisioningRequest admission checks.
	ProvisioningController = "kueue.x-k8s.io/provisioning-request"
)

// Resource is a resource of Kueue's API at APIVersion.
func Resource(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: APIVersion, Resource: resource}
}

// Kueue's resources those clients use.
var (
	ResourceFlavors            = Resource("resourceflavors")
	ClusterQueues              = Resource("clusterqueues")
	LocalQueues                = Resource("localqueues")
	AdmissionChecks            = Resource("admissionchecks")
	ProvisioningRequestConfigs = Resource("provisioningrequestconfigs")
	Workloads                  = Resource("workloads")
	WorkloadPriorityClasses    = Resource("workloadpriorityclasses")
	Topologies                 = Resource("topologies")
)

// Frameworks are the integrations Kueue runs in a Gantry cluster.
var Frameworks = []string{"batch/job"}

// webhookPaths are the webhooks kept: those of Jobs and of Kueue's kinds.
var webhookPaths = []string{"-batch-v1-job", "-kueue-x-k8s-io-"}

// Module is the pinned Kueue module in the Go module cache.
type Module struct {
	// Dir is the module's source, Version its version.
	Dir, Version string
}

// FindModule locates the Kueue module hack/tools/kueue pins, downloading
// it when the module cache does not hold it yet.
func FindModule(ctx context.Context, root string) (Module, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", module)
	cmd.Dir = filepath.Join(root, "hack", "tools", "kueue")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Module{}, fmt.Errorf("locating %s in %s: %w: %s", module, cmd.Dir, err, strings.TrimSpace(stderr.String()))
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if dir == "" || version == "" {
		// `go list -m` names no directory for a module it has not downloaded.
		return Module{}, fmt.Errorf("%s is not in the module cache: run `make kueue`, which downloads and builds it", module)
	}
	return Module{Dir: dir, Version: version}, nil
}

// Render builds Kueue's manifests for a Gantry cluster in workDir (the
// kustomization over the module's config/default is written there), with
// the manager's image set to image. The objects come in the order they
// must be applied: the Namespace, the CRDs, then the rest.
func Render(workDir string, m Module, image string) ([]*unstructured.Unstructured, error) {
	objs, err := kustomize.BuildOver(filepath.Join(workDir, "kueue"), filepath.Join(m.Dir, "config", "default"), "", nil)
	if err != nil {
		return nil, err
	}
	var ns, crds, rest []*unstructured.Unstructured
	for _, obj := range objs {
		switch obj.GetKind() {
		case "APIService":
			continue
		case "Namespace":
			ns = append(ns, obj)
			continue
		case "CustomResourceDefinition":
			crds = append(crds, obj)
			continue
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			if err := keepWebhooks(obj); err != nil {
				return nil, err
			}
		case "ConfigMap":
			if obj.GetName() == ConfigMap {
				if err := setFrameworks(obj); err != nil {
					return nil, err
				}
			}
		case "Deployment":
			if obj.GetName() == Deployment {
				if err := setManager(obj, image); err != nil {
					return nil, err
				}
			}
		}
		rest = append(rest, obj)
	}
	if len(ns) != 1 || len(crds) == 0 || find(rest, "Deployment", Deployment) == nil || find(rest, "ConfigMap", ConfigMap) == nil {
		return nil, fmt.Errorf("%s@%s config/default: want its Namespace, CRDs, Deployment %s and ConfigMap %s; got %d namespaces, %d CRDs",
			module, m.Version, Deployment, ConfigMap, len(ns), len(crds))
	}
	return append(append(ns, crds...), rest...), nil
}

// find returns the object of kind and name in objs, or nil.
func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// keepWebhooks drops the webhooks of kinds Kueue does not manage here.
func keepWebhooks(obj *unstructured.Unstructured) error {
	hooks, _, err := unstructured.NestedSlice(obj.Object, "webhooks")
	if err != nil {
		return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	kept := hooks[:0]
	for _, h := range hooks {
		m, _ := h.(map[string]any)
		path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
		if slices.ContainsFunc(webhookPaths, func(p string) bool { return strings.Contains(path, p) }) {
			kept = append(kept, h)
		}
	}
	return unstructured.SetNestedSlice(obj.Object, kept, "webhooks")
}

// setFrameworks narrows the manager configuration's integrations.
func setFrameworks(cm *unstructured.Unstructured) error {
	cfg, err := Config(cm)
	if err != nil {
		return err
	}
	frameworks := make([]any, len(Frameworks))
	for i, f := range Frameworks {
		frameworks[i] = f
	}
	if err := unstructured.SetNestedSlice(cfg, frameworks, "integrations", "frameworks"); err != nil {
		return err
	}
	return SetConfig(cm, cfg)
}

// Config is the manager configuration held by Kueue's ConfigMap.
func Config(cm *unstructured.Unstructured) (map[string]any, error) {
	text, _, _ := unstructured.NestedString(cm.Object, "data", ConfigKey)
	cfg := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		return nil, fmt.Errorf("ConfigMap %s, %s: %w", cm.GetName(), ConfigKey, err)
	}
	if cfg["kind"] != "Configuration" {
		return nil, fmt.Errorf("ConfigMap %s, %s: not a Kueue Configuration", cm.GetName(), ConfigKey)
	}
	return cfg, nil
}

// SetConfig stores cfg in Kueue's ConfigMap.
func SetConfig(cm *unstructured.Unstructured, cfg map[string]any) error {
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return unstructured.SetNestedField(cm.Object, string(data), "data", ConfigKey)
}

// setManager gives the manager's container Gantry's image, which the
// nodes have preloaded, and the feature gates.
func setManager(d *unstructured.Unstructured, image string) error {
	containers, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return fmt.Errorf("Deployment %s has no containers", d.GetName())
	}
	c := containers[0].(map[string]any)
	c["image"] = image
	c["imagePullPolicy"] = "IfNotPresent"
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	c["args"] = toAny(append(args, "--feature-gates="+FeatureGates))
	return unstructured.SetNestedSlice(d.Object, containers, "spec", "template", "spec", "containers")
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Apply applies objs (Render's, in its order) server-side as FieldManager,
// waiting for the CRDs to be Established before what follows them.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, timeout time.Duration) error {
	a, err := applypkg.New(cfg, FieldManager)
	if err != nil {
		return err
	}
	crdsEnd := 0
	for i, o := range objs {
		if o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition" {
			crdsEnd = i + 1
		}
	}
	if err := a.Apply(ctx, objs[:crdsEnd], false); err != nil {
		return err
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, o := range objs[:crdsEnd] {
		if o.GetKind() == "CustomResourceDefinition" {
			if err := install.WaitEstablished(ctx, client, o.GetName(), timeout); err != nil {
				return err
			}
		}
	}
	return a.Apply(ctx, objs[crdsEnd:], false)
}

// The probes WaitReady writes (dry run): one through Kueue's mutating and
// validating webhooks, one through a CRD's conversion webhook (v1beta1 is
// served, v1beta2 stored).
var (
	localQueuesV1 = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta1", Resource: "localqueues"}
)

// WaitReady waits until Kueue's webhooks answer with the CA it injected:
// a ResourceFlavor passes its admission webhooks and a v1beta1 LocalQueue
// its conversion webhook, both as dry runs. It gives up early when exited
// (if not nil) says the manager is gone.
func WaitReady(ctx context.Context, cfg *rest.Config, timeout time.Duration, exited func() bool) error {
	cfg = rest.CopyConfig(cfg)
	// The v1beta1 probe draws a deprecation warning, which is its point.
	cfg.WarningHandler = rest.NoWarnings{}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	probes := []struct {
		gvr schema.GroupVersionResource
		obj *unstructured.Unstructured
	}{
		{ResourceFlavors, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
			"metadata": map[string]any{"name": "gantry-readiness-probe"},
		}}},
		{localQueuesV1, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
			"metadata": map[string]any{"name": "gantry-readiness-probe", "namespace": Namespace},
			"spec":     map[string]any{"clusterQueue": "gantry-readiness-probe"},
		}}},
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if exited != nil && exited() {
			return false, errors.New("Kueue's manager exited")
		}
		for _, p := range probes {
			ri := dyn.Resource(p.gvr).Namespace(p.obj.GetNamespace())
			_, err := ri.Create(ctx, p.obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				if ctx.Err() == nil {
					last = err
				}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("Kueue's webhooks did not answer within %s: %w", timeout, last)
	}
	return err
}

// WebhookPortName is the name of WebhookService's port among objs (Kueue
// leaves it unnamed), which the EndpointSlice of a manager running outside
// the cluster must repeat for kube-apiserver to route to it.
func WebhookPortName(objs []*unstructured.Unstructured) (string, error) {
	svc := find(objs, "Service", WebhookService)
	if svc == nil {
		return "", fmt.Errorf("Service %s is not among Kueue's manifests", WebhookService)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 {
		return "", fmt.Errorf("Service %s has %d ports, want 1", WebhookService, len(ports))
	}
	name, _, _ := unstructured.NestedString(ports[0].(map[string]any), "name")
	return name, nil
}
