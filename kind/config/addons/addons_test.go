// Package addons_test renders kind/config/addons, the kustomization
// `gantry-cluster up --runtime kind` deploys (and ../managed-addons, its
// counterpart on the stock control plane), and checks what the kind
// cluster depends on: both Deployments on the control-plane node, kwok
// playing only the fake nodes, the provisioner with the kwok provider.
package addons_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups/kwok"
	"github.com/gantry-dev/gantry/test/util"
)

const (
	namespace    = "gantry-system"
	controlPlane = "node-role.kubernetes.io/control-plane"
)

// render builds this directory's kustomization as `kubectl apply -k` would.
func render(t *testing.T) []runtime.Object {
	t.Helper()
	return renderDir(t, ".")
}

func renderDir(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	objs, err := util.Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find[T interface {
	runtime.Object
	GetName() string
	GetNamespace() string
}](t *testing.T, objs []runtime.Object, ns, name string) T {
	t.Helper()
	for _, o := range objs {
		if o, ok := o.(T); ok && o.GetName() == name && o.GetNamespace() == ns {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T %s/%s rendered", zero, ns, name)
	return zero
}

// kwokOptions is the part of kwok's KwokConfiguration
// (sigs.k8s.io/kwok/pkg/apis/config/v1alpha1) the ConfigMap sets.
type kwokOptions struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Options    struct {
		ManageAllNodes                    *bool    `json:"manageAllNodes"`
		ManageNodesWithAnnotationSelector string   `json:"manageNodesWithAnnotationSelector"`
		ManageNodesWithLabelSelector      *string  `json:"manageNodesWithLabelSelector"`
		NodeLeaseDurationSeconds          int      `json:"nodeLeaseDurationSeconds"`
		CIDR                              string   `json:"cidr"`
		NodePort                          int      `json:"nodePort"`
		EnableCRDs                        []string `json:"enableCRDs"`
		NodeLeaseParallelism              int      `json:"nodeLeaseParallelism"`
		NodePlayStageParallelism          int      `json:"nodePlayStageParallelism"`
		PodPlayStageParallelism           int      `json:"podPlayStageParallelism"`
		PodsOnNodeSyncParallelism         int      `json:"podsOnNodeSyncParallelism"`
		EnablePodsOnNodeSyncListPager     *bool    `json:"enablePodsOnNodeSyncListPager"`
	} `json:"options"`
}

// Every Deployment, with Gantry's control plane (this directory) or the
// stock one (../managed-addons), runs on the control-plane node, in a
// container of the name the runtime finds it by (kind/pkg/runtime/kind's
// components).
func TestDeploymentsRunOnTheControlPlane(t *testing.T) {
	type want struct {
		container string
		replicas  int32
	}
	gantry := map[string]want{"gantry-provisioner": {"provisioner", 2}, "kwok-controller": {"kwok-controller", 1}}
	stock := maps.Clone(gantry)
	stock["gantry-scheduler"] = want{"gantry-scheduler", 2}
	stock["gantry-webhook"] = want{"webhook", 2}
	for dir, deployments := range map[string]map[string]want{".": gantry, "../managed-addons": stock} {
		objs := renderDir(t, dir)
		if n := len(util.OfType[*appsv1.Deployment](objs)); n != len(deployments) {
			t.Errorf("%s: %d Deployments, want %d", dir, n, len(deployments))
		}
		for name, w := range deployments {
			d := find[*appsv1.Deployment](t, objs, namespace, name)
			spec := d.Spec.Template.Spec
			if len(spec.Containers) != 1 || spec.Containers[0].Name != w.container {
				t.Errorf("%s %s: containers %v, want one named %s", dir, name, spec.Containers, w.container)
			}
			if v, ok := spec.NodeSelector[controlPlane]; !ok || v != "" || len(spec.NodeSelector) != 1 {
				t.Errorf("%s %s: nodeSelector %v, want only %s: \"\"", dir, name, spec.NodeSelector, controlPlane)
			}
			tolerated := slices.ContainsFunc(spec.Tolerations, func(tol v1.Toleration) bool {
				// kubeadm's taint: the key, no value, NoSchedule.
				return tol.Key == controlPlane && (tol.Effect == "" || tol.Effect == v1.TaintEffectNoSchedule) &&
					(tol.Operator == v1.TolerationOpExists || tol.Value == "")
			})
			if !tolerated {
				t.Errorf("%s %s: tolerations %v do not tolerate %s:NoSchedule", dir, name, spec.Tolerations, controlPlane)
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas != w.replicas {
				t.Errorf("%s %s: replicas %v, want %d", dir, name, d.Spec.Replicas, w.replicas)
			}
		}
	}
}

func TestProvisionerUsesTheKwokProvider(t *testing.T) {
	d := find[*appsv1.Deployment](t, render(t), namespace, "gantry-provisioner")
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--node-group-provider=kwok") {
		t.Errorf("provisioner args %q have no --node-group-provider=kwok", c.Args)
	}
}

// TestProvisionerConfigMaps: the provisioner mounts the scheduler
// configuration of config/overlays/full, which the runtime replaces with the
// cluster's (kind/pkg/runtime/kind's TestRenderWorkloads), and the node
// groups, which only the runtime knows: rendering those here would
// overwrite its own.
func TestProvisionerConfigMaps(t *testing.T) {
	objs := render(t)
	d := find[*appsv1.Deployment](t, objs, namespace, "gantry-provisioner")
	var mounted []string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			mounted = append(mounted, v.ConfigMap.Name)
		}
	}
	slices.Sort(mounted)
	if want := []string{"gantry-provisioner-node-groups", "kube-scheduler-config"}; !slices.Equal(mounted, want) {
		t.Errorf("provisioner mounts ConfigMaps %v, want %v", mounted, want)
	}
	find[*v1.ConfigMap](t, objs, namespace, "kube-scheduler-config")
	for _, o := range objs {
		if cm, ok := o.(*v1.ConfigMap); ok && cm.Name == "gantry-provisioner-node-groups" {
			t.Errorf("ConfigMap %s/%s is rendered; the runtime creates it", cm.Namespace, cm.Name)
		}
	}
}

func TestKwokManagesOnlyFakeNodes(t *testing.T) {
	objs := render(t)
	d := find[*appsv1.Deployment](t, objs, namespace, "kwok-controller")
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if c.Image != "kwok" {
		t.Errorf("kwok image %q, want the name the runtime's images: sets", c.Image)
	}

	// The options file kwok reads is the kwok-options ConfigMap's kwok.yaml.
	const dir = "/etc/kwok-options"
	if !slices.Contains(c.Args, "--config="+dir+"/kwok.yaml") {
		t.Fatalf("kwok args %q do not load %s/kwok.yaml", c.Args, dir)
	}
	if slices.Contains(c.Args, "--config=/etc/kwok/stages.yaml") {
		t.Errorf("kwok args %q load the image's stages again; its entrypoint does", c.Args)
	}
	var volume string
	for _, m := range c.VolumeMounts {
		if m.MountPath == dir {
			volume = m.Name
		}
	}
	var cmName string
	for _, v := range spec.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName != "kwok-options" {
		t.Fatalf("%s is mounted from ConfigMap %q (volume %q), want kwok-options", dir, cmName, volume)
	}
	cm := find[*v1.ConfigMap](t, objs, namespace, cmName)
	var cfg kwokOptions
	if err := yaml.UnmarshalStrict([]byte(cm.Data["kwok.yaml"]), &cfg); err != nil {
		t.Fatalf("kwok-options kwok.yaml: %v\n%s", err, cm.Data["kwok.yaml"])
	}
	o := cfg.Options
	if cfg.APIVersion != "config.kwok.x-k8s.io/v1alpha1" || cfg.Kind != "KwokConfiguration" {
		t.Errorf("kwok-options holds a %s %s, want a config.kwok.x-k8s.io/v1alpha1 KwokConfiguration", cfg.APIVersion, cfg.Kind)
	}
	if o.ManageAllNodes == nil || *o.ManageAllNodes {
		t.Errorf("manageAllNodes unset or true, want false")
	}
	// The annotation the kwok node-group provider puts on the nodes it creates.
	if want := kwok.KwokAnnotation + "=fake"; o.ManageNodesWithAnnotationSelector != want {
		t.Errorf("manageNodesWithAnnotationSelector %q, want %q", o.ManageNodesWithAnnotationSelector, want)
	}
	if o.ManageNodesWithLabelSelector == nil || *o.ManageNodesWithLabelSelector != "" {
		t.Errorf("manageNodesWithLabelSelector %v, want set to empty", o.ManageNodesWithLabelSelector)
	}
	if len(o.EnableCRDs) != 0 {
		t.Errorf("enableCRDs %v: no kwok CRD is installed", o.EnableCRDs)
	}
	if o.NodeLeaseDurationSeconds <= 0 {
		t.Errorf("nodeLeaseDurationSeconds %d: the fake nodes need leases", o.NodeLeaseDurationSeconds)
	}
	// kwok applies no default to a configuration it is given, and exits
	// when one of these is 0 (or plays no pod, for the last).
	for name, n := range map[string]int{
		"nodeLeaseParallelism": o.NodeLeaseParallelism, "nodePlayStageParallelism": o.NodePlayStageParallelism,
		"podPlayStageParallelism": o.PodPlayStageParallelism, "podsOnNodeSyncParallelism": o.PodsOnNodeSyncParallelism,
	} {
		if n <= 0 {
			t.Errorf("%s %d, want at least 1", name, n)
		}
	}
	for _, p := range []*v1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
			t.Errorf("kwok probe %v, want an HTTP GET of /healthz", p)
			continue
		}
		port := p.HTTPGet.Port.IntValue()
		for _, cp := range c.Ports {
			if cp.Name == p.HTTPGet.Port.String() {
				port = int(cp.ContainerPort)
			}
		}
		if port != o.NodePort {
			t.Errorf("kwok probe on port %s, kwok serves on nodePort %d", p.HTTPGet.Port.String(), o.NodePort)
		}
	}
	if !slices.Contains(c.Args, "--node-ip=$(POD_IP)") ||
		!slices.ContainsFunc(c.Env, func(e v1.EnvVar) bool {
			return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
		}) {
		t.Errorf("kwok args %q env %v: want --node-ip=$(POD_IP) from status.podIP", c.Args, c.Env)
	}
}

func TestKwokIsLocked(t *testing.T) {
	d := find[*appsv1.Deployment](t, render(t), namespace, "kwok-controller")
	pod, c := d.Spec.Template.Spec.SecurityContext, d.Spec.Template.Spec.Containers[0].SecurityContext
	switch {
	case pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || *pod.RunAsUser != 65532 ||
		pod.SeccompProfile == nil || pod.SeccompProfile.Type != v1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("kwok pod security context %+v, want non-root 65532 with RuntimeDefault seccomp", pod)
	case c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem || c.AllowPrivilegeEscalation == nil ||
		*c.AllowPrivilegeEscalation || c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []v1.Capability{"ALL"}):
		t.Errorf("kwok container security context %+v, want a read-only root, no escalation, every capability dropped", c)
	}
	if req := d.Spec.Template.Spec.Containers[0].Resources.Requests; req.Cpu().IsZero() || req.Memory().IsZero() {
		t.Errorf("kwok requests %v, want cpu and memory", req)
	}
}

// TestKwokRBAC: kwok may write node and pod status, delete pods, and write
// leases only in kube-node-lease; nothing of kwok's CRDs, no wildcard.
func TestKwokRBAC(t *testing.T) {
	objs := render(t)
	granted := map[string][]string{} // "namespace resource" -> verbs
	add := func(ns string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					key := strings.TrimSpace(ns + " " + strings.TrimPrefix(g+"/"+res, "/"))
					granted[key] = append(granted[key], r.Verbs...)
				}
			}
		}
	}
	bound := 0
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			if slices.Contains(o.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: "kwok-controller", Namespace: namespace}) {
				bound++
				add("", find[*rbacv1.ClusterRole](t, objs, "", o.RoleRef.Name).Rules)
			}
		case *rbacv1.RoleBinding:
			if slices.Contains(o.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: "kwok-controller", Namespace: namespace}) {
				bound++
				add(o.Namespace, find[*rbacv1.Role](t, objs, o.Namespace, o.RoleRef.Name).Rules)
			}
		}
	}
	if bound == 0 {
		t.Fatal("nothing is bound to the kwok-controller ServiceAccount")
	}
	_ = find[*v1.ServiceAccount](t, objs, namespace, "kwok-controller")
	for key, verbs := range granted {
		slices.Sort(verbs)
		granted[key] = slices.Compact(verbs)
	}
	want := map[string][]string{
		"nodes":        {"get", "list", "watch"},
		"nodes/status": {"patch"},
		"pods":         {"delete", "get", "list", "watch"},
		"pods/status":  {"patch"},
		"events":       {"create", "patch"},
		"kube-node-lease coordination.k8s.io/leases": {"create", "get", "list", "update", "watch"},
	}
	for key, verbs := range want {
		if !slices.Equal(granted[key], verbs) {
			t.Errorf("%s: verbs %v, want %v", key, granted[key], verbs)
		}
	}
	for key := range granted {
		if _, ok := want[key]; !ok {
			t.Errorf("kwok is granted %s %v, which it does not use", key, granted[key])
		}
	}
}
