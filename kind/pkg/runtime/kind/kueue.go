package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
)

// Kueue's manager runs as Kueue's own manifests run it, a Deployment of
// the image `make images` built (preloaded in the node image), pinned to
// the control-plane node like Gantry's workloads so that its logs and
// restarts go through that node. The file kueue-version in the runtime's directory
// says the cluster has it.

var _ cluster.KueueRunner = &Runtime{}

// kueueComponent is Kueue's manager among the components.
var kueueComponent = component{name: kueue.Component, container: "manager"}

func (r *Runtime) kueueFile() string { return filepath.Join(r.dir(), "kueue-version") }

func (r *Runtime) hasKueue() bool {
	_, err := os.Stat(r.kueueFile())
	return err == nil
}

// RunKueue implements cluster.KueueRunner.
func (r *Runtime) RunKueue(ctx context.Context, cfg *rest.Config, m kueue.Module) (string, error) {
	objs, err := kueue.Render(r.dir(), m, DefaultImageRepository+"/kueue:"+m.Version)
	if err != nil {
		return "", err
	}
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == kueue.Deployment {
			if err := onControlPlane(o); err != nil {
				return "", err
			}
		}
	}
	if err := os.MkdirAll(r.dir(), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(r.kueueFile(), []byte(m.Version+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := kueue.Apply(ctx, cfg, objs, r.timeout()); err != nil {
		return "", err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	d, err := r.waitDeployment(ctx, client, kueue.Namespace, kueue.Deployment)
	if err != nil {
		return "", &workloadError{component: kueue.Component, err: fmt.Errorf("%w (the node image preloads %s/kueue:%s since Kueue's image is among `make images`; an older node image needs `make node-image`)", err, DefaultImageRepository, m.Version)}
	}
	return fmt.Sprintf("%s %d/%d available", kueue.Deployment, d.Status.AvailableReplicas, *d.Spec.Replicas), nil
}

// onControlPlane pins a Deployment's pods to the control-plane node.
func onControlPlane(d *unstructured.Unstructured) error {
	spec := []string{"spec", "template", "spec"}
	if err := unstructured.SetNestedStringMap(d.Object, map[string]string{"node-role.kubernetes.io/control-plane": ""}, append(spec, "nodeSelector")...); err != nil {
		return err
	}
	tolerations, _, _ := unstructured.NestedSlice(d.Object, append(spec, "tolerations")...)
	tolerations = append(tolerations, map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"})
	return unstructured.SetNestedSlice(d.Object, tolerations, append(spec, "tolerations")...)
}
