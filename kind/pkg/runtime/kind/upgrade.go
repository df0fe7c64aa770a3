package kind

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kindnodes "sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/gantry-dev/gantry/crds/install"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// An upgrade moves a cluster that an earlier Gantry release made (its node
// image, its images tagged with that release) to this checkout's release
// in place, in docs/upgrade.md's order: Gantry's CRDs; the control plane's
// static pods one at a time, etcd first and kube-scheduler never before
// kube-apiserver; CoreDNS; then Gantry's workloads one Deployment at a
// time, gantry-scheduler before gantry-webhook before gantry-provisioner.
// The nodes keep their kubelet and kube-proxy, which upstream's skew
// policy allows up to three minor releases older than kube-apiserver.
//
// No registry serves gantry.local: each step first loads the images it
// needs from `make images`' docker-load archives into the nodes'
// containerd, as `kind load image-archive` does. A static pod is upgraded
// by naming the new image in its manifest, the only field the move between
// two Gantry releases changes (kubeadm's flags are the same), and kubelet
// restarts it; a step is done once the component runs the new image and
// is Ready.

// The upgrade steps that are not a component.
const (
	upgradeStepCRDs = "crds"
	upgradeStepDNS  = "coredns"
)

// upgradeStaticPods are the static pods of the control-plane node, in the
// order they are upgraded.
var upgradeStaticPods = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// upgradeWorkloads are Gantry's Deployments in the order they are upgraded
// (docs/upgrade.md): the scheduler, the webhook, the provisioner, then
// the kwok controller the kind runtime adds.
func (r *Runtime) upgradeWorkloads() []workload {
	order := []string{"gantry-scheduler", "gantry-webhook", "gantry-provisioner", "kwok-controller"}
	ws := r.workloads()
	slices.SortStableFunc(ws, func(a, b workload) int {
		return slices.Index(order, a.component) - slices.Index(order, b.component)
	})
	return ws
}

var _ cluster.Upgrader = &Runtime{}

// UpgradeSteps implements cluster.Upgrader.
func (r *Runtime) UpgradeSteps() []string {
	out := []string{upgradeStepCRDs}
	out = append(out, upgradeStaticPods...)
	out = append(out, upgradeStepDNS)
	for _, w := range r.upgradeWorkloads() {
		out = append(out, w.component)
	}
	return out
}

// Upgrade implements cluster.Upgrader.
func (r *Runtime) Upgrade(ctx context.Context, step string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.o.KubeconfigPath)
	if err != nil {
		return "", err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	switch {
	case step == upgradeStepCRDs:
		// As up installs them: applied, each Established, then their roles.
		names, err := install.Install(ctx, cfg, r.o.CRDDir, r.timeout())
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d CustomResourceDefinitions Established", len(names)), nil
	case slices.Contains(upgradeStaticPods, step):
		return r.upgradeStaticPod(ctx, client, step)
	case step == upgradeStepDNS:
		return r.upgradeCoreDNS(ctx, client)
	}
	for _, w := range r.upgradeWorkloads() {
		if w.component == step {
			return r.upgradeWorkload(ctx, cfg, client, w)
		}
	}
	return "", fmt.Errorf("unknown upgrade step %q (steps: %s)", step, strings.Join(r.UpgradeSteps(), ", "))
}

// releaseImages are the references `make images` built for this checkout,
// by name (gantry.local/<name>), from _output/images/digests.txt.
func (r *Runtime) releaseImages() (map[string]string, error) {
	file := filepath.Join(r.o.Root, "_output", "images", "digests.txt")
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("an upgrade loads this release's images from `make images`: %w", err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		name, _, ok := strings.Cut(fields[0], ":")
		if ok {
			out[name] = fields[0]
		}
	}
	return out, sc.Err()
}

// releaseImage is this release's reference of the image named like ref
// (gantry.local/<name>, any tag).
func (r *Runtime) releaseImage(ref string) (string, error) {
	images, err := r.releaseImages()
	if err != nil {
		return "", err
	}
	name, _, _ := strings.Cut(ref, ":")
	if out, ok := images[name]; ok {
		return out, nil
	}
	return "", fmt.Errorf("this release builds no image %s (_output/images/digests.txt)", name)
}

// loadImage loads ref from its docker-load archive into the containerd of
// each of nodes that lacks it.
func (r *Runtime) loadImage(ref string, nodes []kindnodes.Node) error {
	name, _, _ := strings.Cut(path.Base(ref), ":")
	archive := filepath.Join(r.o.Root, "_output", "images", name+".linux-"+goruntime.GOARCH+".tar")
	for _, n := range nodes {
		if id, err := nodeutils.ImageID(n, ref); err == nil && id != "" {
			continue
		}
		f, err := os.Open(archive)
		if err != nil {
			return fmt.Errorf("loading %s into %s: %w (`make images PLATFORMS=linux/%s` builds it)", ref, n, err, goruntime.GOARCH)
		}
		err = nodeutils.LoadImageArchive(n, f)
		_ = f.Close()
		if err != nil {
			return r.kindError(fmt.Sprintf("loading %s into %s", ref, n), err)
		}
	}
	return nil
}

// manifestImage finds the image line of a static pod's manifest: a
// gantry.local image of the component (Gantry's or, on the stock control
// plane, upstream's build, named <component>-upstream).
func manifestImage(manifest []byte, component string) (line, ref string, ok bool) {
	re := regexp.MustCompile(`(?m)^\s*image:\s*(` + regexp.QuoteMeta(DefaultImageRepository+"/"+component) + `(?:-upstream)?:\S+)\s*$`)
	m := re.FindSubmatchIndex(manifest)
	if m == nil {
		return "", "", false
	}
	return string(manifest[m[0]:m[1]]), string(manifest[m[2]:m[3]]), true
}

// upgradeManifest returns manifest with ref in place of the component's
// image, and for Gantry's kube-scheduler with config in place of the
// configuration file it names.
func upgradeManifest(manifest []byte, component, ref, config string) ([]byte, error) {
	line, old, ok := manifestImage(manifest, component)
	if !ok {
		return nil, fmt.Errorf("the manifest of %s names no %s/%s image", component, DefaultImageRepository, component)
	}
	out := bytes.Replace(manifest, []byte(line), []byte(strings.Replace(line, old, ref, 1)), 1)
	if config != "" {
		flag := "--config=" + schedulerConfigFile
		if !bytes.Contains(out, []byte(flag)) {
			return nil, fmt.Errorf("the manifest of %s has no %s", component, flag)
		}
		out = bytes.Replace(out, []byte(flag), []byte("--config="+config), 1)
	}
	return out, nil
}

// upgradeStaticPod names this release's image in a static pod's manifest
// (and for Gantry's kube-scheduler this release's configuration, written
// next to the one the cluster was made with) and waits for kubelet to run it.
func (r *Runtime) upgradeStaticPod(ctx context.Context, client kubernetes.Interface, component string) (string, error) {
	cp, err := r.cp()
	if err != nil {
		return "", err
	}
	manifest := "/etc/kubernetes/manifests/" + component + ".yaml"
	var data bytes.Buffer
	if err := cp.CommandContext(ctx, "cat", manifest).SetStdout(&data).Run(); err != nil {
		return "", r.kindError("reading "+manifest, err)
	}
	_, old, ok := manifestImage(data.Bytes(), component)
	if !ok {
		return "", fmt.Errorf("%s names no %s/%s image", manifest, DefaultImageRepository, component)
	}
	ref, err := r.releaseImage(old)
	if err != nil {
		return "", err
	}
	if old == ref {
		return "runs " + ref + " already", nil
	}
	if err := r.loadImage(ref, []kindnodes.Node{cp}); err != nil {
		return "", err
	}
	config := ""
	if component == "kube-scheduler" && r.plane == cluster.ControlPlaneGantry {
		if config, err = r.upgradeSchedulerConfig(cp); err != nil {
			return "", err
		}
	}
	out, err := upgradeManifest(data.Bytes(), component, ref, config)
	if err != nil {
		return "", fmt.Errorf("%s: %w", manifest, err)
	}
	// kubelet watches the directory: the new manifest is written beside
	// it and moved in, so it never reads half of one.
	staged := "/etc/kubernetes/" + component + ".yaml.upgrade"
	if err := nodeutils.WriteFile(cp, staged, string(out)); err != nil {
		return "", r.kindError("writing "+staged, err)
	}
	if err := cp.CommandContext(ctx, "mv", staged, manifest).Run(); err != nil {
		return "", r.kindError("replacing "+manifest, err)
	}
	if err := r.waitStaticPod(ctx, client, component, ref); err != nil {
		return "", err
	}
	return old + " → " + ref, nil
}

// upgradeSchedulerConfig writes this release's scheduler configuration
// into the control-plane node beside the one mounted when the cluster was
// made (a file of the host's, which this release does not own), and
// returns its path.
func (r *Runtime) upgradeSchedulerConfig(cp kindnodes.Node) (string, error) {
	out, err := r.nodeSchedulerConfig()
	if err != nil {
		return "", err
	}
	file := schedulerConfigDir + "/kube-scheduler-" + r.kubeVersion + ".yaml"
	if err := nodeutils.WriteFile(cp, file, string(out)); err != nil {
		return "", r.kindError("writing "+file, err)
	}
	return file, nil
}

// waitStaticPod waits until the mirror pod of a static pod runs ref, Ready.
// kube-apiserver's own restart fails requests meanwhile: they are retried.
func (r *Runtime) waitStaticPod(ctx context.Context, client kubernetes.Interface, component, ref string) error {
	name := component + "-" + r.controlPlane()
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, r.timeout(), true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = podState(p)
		return runsImage(p, component, ref), nil
	})
	if err != nil {
		return &workloadError{component: component, err: fmt.Errorf("static pod %s not running %s and Ready within %s (last: %s)", name, ref, r.timeout(), last)}
	}
	return nil
}

// runsImage reports whether p's container is ref, running, and p Ready.
func runsImage(p *v1.Pod, container, ref string) bool {
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			ready = c.Status == v1.ConditionTrue
		}
	}
	if !ready {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == container {
			return c.Image == ref && c.State.Running != nil && c.Ready
		}
	}
	return false
}

func podState(p *v1.Pod) string {
	var parts []string
	for _, c := range p.Status.ContainerStatuses {
		state := "waiting"
		switch {
		case c.State.Running != nil:
			state = "running"
		case c.State.Terminated != nil:
			state = "terminated: " + c.State.Terminated.Reason
		case c.State.Waiting != nil:
			state = "waiting: " + c.State.Waiting.Reason
		}
		parts = append(parts, fmt.Sprintf("%s %s %s ready=%t", c.Name, c.Image, state, c.Ready))
	}
	return strings.Join(parts, "; ")
}

// upgradeCoreDNS sets kubeadm's CoreDNS Deployment to this release's
// CoreDNS image (kubeadm's CoreDNSVersion), loaded into every node.
func (r *Runtime) upgradeCoreDNS(ctx context.Context, client kubernetes.Interface) (string, error) {
	d, err := client.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	var old string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "coredns" {
			old = c.Image
		}
	}
	if old == "" {
		return "", fmt.Errorf("Deployment kube-system/coredns has no container coredns")
	}
	ref, err := r.releaseImage(old)
	if err != nil {
		return "", err
	}
	if old == ref {
		return "runs " + ref + " already", nil
	}
	ns, err := r.nodes()
	if err != nil {
		return "", err
	}
	if err := r.loadImage(ref, ns); err != nil {
		return "", err
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"coredns","image":%q}]}}}}`, ref)
	if _, err := client.AppsV1().Deployments(metav1.NamespaceSystem).Patch(ctx, "coredns", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return "", err
	}
	if _, err := r.waitDeployment(ctx, client, metav1.NamespaceSystem, "coredns"); err != nil {
		return "", err
	}
	return old + " → " + ref, nil
}

// upgradeWorkload applies this release's add-ons except the Deployments
// of the other workloads (which keep their release until their own step),
// after loading the images of w's Deployment into every node, and waits
// for w's Deployment to roll out.
func (r *Runtime) upgradeWorkload(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, w workload) (string, error) {
	objs, err := r.RenderWorkloads()
	if err != nil {
		return "", err
	}
	objs = append(objs, kubeProxyOffFakeNodes())
	var keep []*unstructured.Unstructured
	var images []string
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			keep = append(keep, o)
			continue
		}
		if o.GetName() != w.deployment || o.GetNamespace() != workloadsNamespace {
			continue
		}
		keep = append(keep, o)
		for _, field := range []string{"initContainers", "containers"} {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
			for _, c := range cs {
				if img, _ := c.(map[string]any)["image"].(string); strings.HasPrefix(img, DefaultImageRepository+"/") && !slices.Contains(images, img) {
					images = append(images, img)
				}
			}
		}
	}
	if len(images) == 0 {
		return "", fmt.Errorf("this release's add-ons have no Deployment %s/%s", workloadsNamespace, w.deployment)
	}
	before, err := client.AppsV1().Deployments(workloadsNamespace).Get(ctx, w.deployment, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	var old []string
	if before != nil && err == nil {
		for _, c := range before.Spec.Template.Spec.Containers {
			old = append(old, c.Image)
		}
	}
	ns, err := r.nodes()
	if err != nil {
		return "", err
	}
	for _, img := range images {
		if err := r.loadImage(img, ns); err != nil {
			return "", err
		}
	}
	if err := apply(ctx, cfg, keep); err != nil {
		return "", err
	}
	d, err := r.waitDeployment(ctx, client, workloadsNamespace, w.deployment)
	if err != nil {
		return "", &workloadError{component: w.component, err: err}
	}
	return fmt.Sprintf("%s → %s, %d/%d available", strings.Join(old, ","), strings.Join(images, ","), d.Status.AvailableReplicas, *d.Spec.Replicas), nil
}
