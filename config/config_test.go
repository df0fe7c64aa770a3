// Package config_test renders the overlays of config/ as `kubectl apply -k`
// would and checks what an install depends on; config/integration
// dry-runs them against a real API server.
package config_test

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/internal/kustomize"
	"github.com/gantry-dev/gantry/test/util"
)

const (
	namespace = "gantry-system"
	partOf    = "app.kubernetes.io/part-of"
)

func render(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	objs, err := util.Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// renderWith renders overlay with components added, as a user's own
// kustomization would.
func renderWith(t *testing.T, overlay string, components ...string) []runtime.Object {
	t.Helper()
	dir := t.TempDir()
	if err := kustomize.WriteWithComponents(dir, overlay, components...); err != nil {
		t.Fatal(err)
	}
	return render(t, dir)
}

func find[T interface {
	runtime.Object
	GetName() string
}](t *testing.T, objs []runtime.Object, name string) T {
	t.Helper()
	for _, o := range util.OfType[T](objs) {
		if o.GetName() == name {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T %s rendered", zero, name)
	return zero
}

// kubeVersion is the pinned Kubernetes release, the tag of Gantry's images.
func kubeVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes\s+(v\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod requires no k8s.io/kubernetes")
	}
	return string(m[1])
}

// Every object is labelled as Gantry's, in gantry-system unless it is
// cluster-scoped or the one RoleBinding that must be in kube-system, and
// every image is a release image of the pinned Kubernetes release (what
// `make images` tags and `make manifests` pins by digest).
func TestOverlays(t *testing.T) {
	tag := kubeVersion(t)
	for _, overlay := range []string{"overlays/managed", "overlays/full"} {
		t.Run(overlay, func(t *testing.T) {
			objs := render(t, overlay)
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			for _, o := range objs {
				m := o.(metav1.Object)
				kind := o.GetObjectKind().GroupVersionKind().Kind
				if m.GetLabels()[partOf] != "gantry" {
					t.Errorf("%s %s is not labelled %s=gantry", kind, m.GetName(), partOf)
				}
				switch ns := m.GetNamespace(); {
				case ns == "" || ns == namespace:
				case ns == metav1.NamespaceSystem && kind == "RoleBinding" && m.GetName() == "gantry-scheduler:authentication-reader":
				default:
					t.Errorf("%s %s is in namespace %s", kind, m.GetName(), ns)
				}
			}
			for _, d := range util.OfType[*appsv1.Deployment](objs) {
				for _, c := range d.Spec.Template.Spec.Containers {
					if !regexp.MustCompile(`^gantry\.local/[a-z-]+:` + regexp.QuoteMeta(tag) + `$`).MatchString(c.Image) {
						t.Errorf("Deployment %s: image %q, want gantry.local/<name>:%s", d.Name, c.Image, tag)
					}
				}
			}
		})
	}
}

// schedulerConfig decodes the ConfigMap kube-scheduler-config that the
// scheduler (managed) and gantry-provisioner run with.
func schedulerConfig(t *testing.T, objs []runtime.Object) *configv1.KubeSchedulerConfiguration {
	t.Helper()
	cm := find[*v1.ConfigMap](t, objs, "kube-scheduler-config")
	cfg := &configv1.KubeSchedulerConfiguration{}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), cfg); err != nil {
		t.Fatalf("ConfigMap kube-scheduler-config: %v", err)
	}
	return cfg
}

func profileNames(cfg *configv1.KubeSchedulerConfiguration) []string {
	var out []string
	for _, p := range cfg.Profiles {
		out = append(out, *p.SchedulerName)
	}
	return out
}

func arg(c v1.Container, flag string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// bound reports whether a ClusterRoleBinding gives role to the subject.
func bound(objs []runtime.Object, role string, subject rbacv1.Subject) bool {
	for _, b := range util.OfType[*rbacv1.ClusterRoleBinding](objs) {
		if b.RoleRef.Name == role && slices.Contains(b.Subjects, subject) {
			return true
		}
	}
	return false
}

var kubeadmScheduler = rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:kube-scheduler"}

func TestManaged(t *testing.T) {
	objs := render(t, "overlays/managed")

	// The webhook, fail-closed.
	m := find[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "gantry-webhook")
	v := find[*admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "gantry-webhook")
	for _, w := range m.Webhooks {
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("webhook %s: failurePolicy %v, want Fail", w.Name, w.FailurePolicy)
		}
	}
	for _, w := range v.Webhooks {
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("webhook %s: failurePolicy %v, want Fail", w.Name, w.FailurePolicy)
		}
	}

	// The second scheduler: its own names and lease, never the default
	// scheduler's; the provisioner simulates its profile.
	cfg := schedulerConfig(t, objs)
	if got := profileNames(cfg); !slices.Equal(got, []string{"gantry-scheduler", "gantry-best-effort"}) {
		t.Errorf("profiles %v, want [gantry-scheduler gantry-best-effort]", got)
	}
	if le := cfg.LeaderElection; le.ResourceName != "gantry-scheduler" || le.ResourceNamespace != namespace {
		t.Errorf("leader lease %s/%s, want %s/gantry-scheduler", le.ResourceNamespace, le.ResourceName, namespace)
	}
	s := find[*appsv1.Deployment](t, objs, "gantry-scheduler")
	if path, _ := arg(s.Spec.Template.Spec.Containers[0], "--config"); path != "/etc/kube-scheduler/config.yaml" {
		t.Errorf("gantry-scheduler --config=%q", path)
	}
	p := find[*appsv1.Deployment](t, objs, "gantry-provisioner")
	if name, _ := arg(p.Spec.Template.Spec.Containers[0], "--scheduler-name"); name != "gantry-scheduler" {
		t.Errorf("gantry-provisioner --scheduler-name=%q, want gantry-scheduler", name)
	}
	for _, d := range []*appsv1.Deployment{s, p} {
		if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v v1.Volume) bool {
			return v.ConfigMap != nil && v.ConfigMap.Name == "kube-scheduler-config"
		}) {
			t.Errorf("%s does not mount ConfigMap kube-scheduler-config", d.Name)
		}
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "gantry-scheduler", Namespace: namespace}
	for _, role := range []string{"system:kube-scheduler", "system:volume-scheduler", "gantry:kube-scheduler", "system:auth-delegator"} {
		if !bound(objs, role, sa) {
			t.Errorf("the gantry-scheduler ServiceAccount is not bound to %s", role)
		}
	}
	// Least privilege: the cluster's own scheduler gets nothing.
	if bound(objs, "gantry:kube-scheduler", kubeadmScheduler) {
		t.Error("the managed overlay binds gantry:kube-scheduler to the cluster's kube-scheduler")
	}
}

func TestFull(t *testing.T) {
	objs := render(t, "overlays/full")
	if n := len(util.OfType[*admissionregistrationv1.MutatingWebhookConfiguration](objs)) +
		len(util.OfType[*admissionregistrationv1.ValidatingWebhookConfiguration](objs)); n != 0 {
		t.Errorf("%d webhook configurations: Gantry's kube-apiserver admits in process", n)
	}
	for _, d := range util.OfType[*appsv1.Deployment](objs) {
		if d.Name != "gantry-provisioner" {
			t.Errorf("Deployment %s: the full overlay runs gantry-provisioner only", d.Name)
		}
	}
	if got := profileNames(schedulerConfig(t, objs)); !slices.Equal(got, []string{"default-scheduler", "gantry-best-effort"}) {
		t.Errorf("profiles %v, want [default-scheduler gantry-best-effort]", got)
	}
	if !bound(objs, "gantry:kube-scheduler", kubeadmScheduler) {
		t.Error("system:kube-scheduler is not bound to gantry:kube-scheduler")
	}
}

// Every Deployment keeps a replica through voluntary disruptions and meets
// the restricted Pod Security Standard that gantry-system enforces.
func TestWorkloads(t *testing.T) {
	for _, overlay := range []string{"overlays/managed", "overlays/full"} {
		t.Run(overlay, func(t *testing.T) {
			objs := render(t, overlay)
			ns := find[*v1.Namespace](t, objs, namespace)
			if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
				t.Errorf("namespace %s enforces %q, want restricted", namespace, got)
			}
			pdbs := util.OfType[*policyv1.PodDisruptionBudget](objs)
			for _, d := range util.OfType[*appsv1.Deployment](objs) {
				if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
					t.Errorf("%s: replicas %v, want 2 or more", d.Name, d.Spec.Replicas)
				}
				covered := slices.ContainsFunc(pdbs, func(p *policyv1.PodDisruptionBudget) bool {
					sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
					return err == nil && !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) &&
						p.Spec.MinAvailable != nil && p.Spec.MinAvailable.IntValue() >= 1
				})
				if !covered {
					t.Errorf("%s: no PodDisruptionBudget keeps one of its pods", d.Name)
				}
				pod := d.Spec.Template.Spec
				if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
					sc.SeccompProfile == nil || sc.SeccompProfile.Type != v1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and RuntimeDefault seccomp", d.Name, sc)
				}
				for _, c := range pod.Containers {
					sc := c.SecurityContext
					if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
						sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
						sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []v1.Capability{"ALL"}) {
						t.Errorf("%s/%s: securityContext %+v, want no privilege escalation, a read-only root and every capability dropped", d.Name, c.Name, sc)
					}
					if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
						t.Errorf("%s/%s: resources %+v, want CPU and memory requests and a memory limit", d.Name, c.Name, c.Resources)
					}
					if c.ReadinessProbe == nil || c.LivenessProbe == nil {
						t.Errorf("%s/%s: want readiness and liveness probes", d.Name, c.Name)
					}
				}
			}
		})
	}
}

// webhook-fail-open turns the pod webhooks to Ignore and leaves the
// validation of MetadataPolicies fail-closed.
func TestWebhookFailOpen(t *testing.T) {
	objs := renderWith(t, "overlays/managed", "components/webhook-fail-open")
	want := map[string]admissionregistrationv1.FailurePolicyType{
		"mutate.gantry.dev": admissionregistrationv1.Ignore, "validate.gantry.dev": admissionregistrationv1.Ignore,
		"validate-policy.gantry.dev": admissionregistrationv1.Fail,
	}
	got := map[string]admissionregistrationv1.FailurePolicyType{}
	for _, w := range find[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "gantry-webhook").Webhooks {
		got[w.Name] = *w.FailurePolicy
	}
	for _, w := range find[*admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "gantry-webhook").Webhooks {
		got[w.Name] = *w.FailurePolicy
	}
	if !maps.Equal(got, want) {
		t.Errorf("failure policies %v, want %v", got, want)
	}
}

// A node-group provider's component applies to either overlay.
func TestProviders(t *testing.T) {
	for _, overlay := range []string{"overlays/managed", "overlays/full"} {
		for _, provider := range []string{"kwok", "clusterapi"} {
			objs := renderWith(t, overlay, "../autoscaler/config/components/"+provider)
			d := find[*appsv1.Deployment](t, objs, "gantry-provisioner")
			if got, _ := arg(d.Spec.Template.Spec.Containers[0], "--node-group-provider"); got != provider {
				t.Errorf("%s with %s: --node-group-provider=%q", overlay, provider, got)
			}
		}
	}
}

// Turning the webhook off as docs/install.md shows leaves no webhook object
// and the rest of the install as it was.
func TestTurningTheWebhookOff(t *testing.T) {
	dir := t.TempDir()
	if err := kustomize.WriteWithComponents(dir, "overlays/managed"); err != nil {
		t.Fatal(err)
	}
	patches := `patches:
- patch: '{"$patch": "delete", "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gantry-webhook", "namespace": "gantry-system"}}'
- patch: '{"$patch": "delete", "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "gantry-webhook"}}'
- patch: '{"$patch": "delete", "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "gantry-webhook"}}'
`
	f, err := os.OpenFile(dir+"/kustomization.yaml", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(patches); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	objs := render(t, dir)
	if n := len(util.OfType[*admissionregistrationv1.MutatingWebhookConfiguration](objs)) +
		len(util.OfType[*admissionregistrationv1.ValidatingWebhookConfiguration](objs)); n != 0 {
		t.Errorf("%d webhook configurations left", n)
	}
	var deployments []string
	for _, d := range util.OfType[*appsv1.Deployment](objs) {
		deployments = append(deployments, d.Name)
	}
	if !slices.Equal(deployments, []string{"gantry-provisioner", "gantry-scheduler"}) {
		t.Errorf("Deployments %v, want gantry-provisioner and gantry-scheduler", deployments)
	}
}
