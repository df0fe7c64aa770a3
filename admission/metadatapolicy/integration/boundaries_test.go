//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

var (
	// requireOwner rejects pods without an owner label.
	requireOwner = policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "owner", Operator: metav1.LabelSelectorOpDoesNotExist}}}}
	// forbidDebug rejects pods labelled debug=true.
	forbidDebug = policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"debug": "true"}}}
	rejectIt    = policyv1alpha1.PolicyAction{Reject: true}
)

// setUp creates namespace ns and the policy in it, and waits until pods
// that violate it (made by violating) are rejected.
func setUp(ctx context.Context, t *testing.T, cfg *rest.Config, policy *policyv1alpha1.MetadataPolicy, violating func(i int) *v1.Pod) {
	t.Helper()
	c := kubernetes.NewForConfigOrDie(cfg)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policy.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(policy)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(policyv1alpha1.SchemeGroupVersion.String())
	u.SetKind("MetadataPolicy")
	if _, err := dynamic.NewForConfigOrDie(cfg).Resource(metadatapolicy.MetadataPoliciesResource).Namespace(policy.Namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	i := 0
	util.Must(t).Poll(ctx, util.Timeout, "the policy rejects a violating pod", func(ctx context.Context) (bool, error) {
		i++
		_, err := c.CoreV1().Pods(policy.Namespace).Create(ctx, violating(i), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})
}

func pod(ns, name string, labels ...string) *v1.Pod {
	w := wrappers.MakePod(name, ns)
	for i := 0; i+1 < len(labels); i += 2 {
		w = w.Label(labels[i], labels[i+1])
	}
	return w.Obj()
}

// TestStatusSubresourceMetadata (finding 11): with a "require label owner"
// policy, an update through pods/status that removes owner is rejected;
// one that leaves the labels alone (as kubelet's do) is not.
func TestStatusSubresourceMetadata(t *testing.T) {
	ctx := context.Background()
	cp := framework.StartWithCRDs(t)
	const ns = "tenant"
	setUp(ctx, t, cp.Config, wrappers.MakeMetadataPolicy("require-owner", ns).Rule(requireOwner, rejectIt).Obj(),
		func(i int) *v1.Pod { return pod(ns, fmt.Sprintf("probe-%d", i)) })
	pods := cp.Client.CoreV1().Pods(ns)
	p, err := pods.Create(ctx, pod(ns, "owned", "owner", "alice"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: "example.com/Checked", Status: v1.ConditionTrue})
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("a status update that leaves the labels alone: %v", err)
	}

	delete(p.Labels, "owner")
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "MetadataPolicy tenant/require-owner rule 0") {
		t.Errorf("status update removing owner: %v, want Forbidden naming MetadataPolicy tenant/require-owner rule 0", err)
	}
	if got, err := pods.Get(ctx, "owned", metav1.GetOptions{}); err != nil || got.Labels["owner"] != "alice" {
		t.Errorf("the pod's owner label after the status update: %v, %v", got.Labels, err)
	}
}

// mutatingPolicy is a MutatingAdmissionPolicy of pod creates applying the
// CEL apply configuration expr, and its binding.
func mutatingPolicy(ctx context.Context, t *testing.T, c kubernetes.Interface, name, expr string, reinvocation admissionregistrationv1.ReinvocationPolicyType) {
	t.Helper()
	adm := c.AdmissionregistrationV1()
	_, err := adm.MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expr},
			}},
			FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy: reinvocation,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRejectionHoldsAfterMutatingAdmissionPolicy (finding 14): a
// MutatingAdmissionPolicy adds a label a policy forbids after the
// MetadataPolicy plugin's last mutating pass; the pod is rejected in the
// validating phase.
//
// kube-apiserver re-runs its in-tree plugins once when a webhook or
// admission policy changed the object, so a single MAP is caught by Admit
// already. Two IfNeeded MAPs are not: each labels the pod n=1 the first time
// and debug=true when it is reinvoked. Whatever their order, the first one
// is reinvoked because the second changed the pod; that happens in the
// second pass, after MetadataPolicy's Admit ran for the last time.
func TestRejectionHoldsAfterMutatingAdmissionPolicy(t *testing.T) {
	ctx := context.Background()
	cp := framework.StartWithCRDs(t)
	const ns, control = "tenant", "control"
	setUp(ctx, t, cp.Config, wrappers.MakeMetadataPolicy("no-debug", ns).Rule(forbidDebug, rejectIt).Obj(),
		func(i int) *v1.Pod { return pod(ns, fmt.Sprintf("probe-%d", i), "debug", "true") })
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: control}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		mutatingPolicy(ctx, t, cp.Client, "debug-"+n, fmt.Sprintf(
			`Object{metadata: Object.metadata{labels: has(object.metadata.labels) && %[1]q in object.metadata.labels ? {%[1]q: "2", "debug": "true"} : {%[1]q: "1"}}}`, n),
			admissionregistrationv1.IfNeededReinvocationPolicy)
	}
	i := 0
	util.Must(t).Poll(ctx, util.Timeout, "the MutatingAdmissionPolicies label pods debug=true", func(ctx context.Context) (bool, error) {
		i++
		p, err := cp.Client.CoreV1().Pods(control).Create(ctx, pod(control, fmt.Sprintf("probe-%d", i)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			t.Logf("probe-%d: labels %v", i, p.Labels)
		}
		return err == nil && p.Labels["debug"] == "true", nil
	})

	p, err := cp.Client.CoreV1().Pods(ns).Create(ctx, pod(ns, "innocent", "app", "web"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "MetadataPolicy tenant/no-debug rule 0") {
		t.Errorf("a pod the MutatingAdmissionPolicies label debug=true: %v (labels %v), want Forbidden naming MetadataPolicy tenant/no-debug rule 0", err, p.Labels)
	}
}

// TestFailClosedAtStart (finding 12): kube-apiserver restarts with the
// policy CRDs and a reject-all policy already in etcd; pods created in a
// tight loop from the moment the new process starts (before and after its
// first /healthz OK) are never admitted: they fail (connection refused,
// not ready) or are rejected.
func TestFailClosedAtStart(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(framework.Root(t), "_output", "bin")
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			Etcd: &envtest.Etcd{Path: filepath.Join(bin, "etcd"), DataDir: filepath.Join(dir, "etcd")},
			// A fixed CertDir keeps the serving certificates and the
			// client CA across the restart.
			APIServer: &envtest.APIServer{Path: filepath.Join(bin, "kube-apiserver"), CertDir: filepath.Join(dir, "apiserver"),
				Out: logFile, Err: logFile},
		},
		ControlPlaneStartTimeout: util.StartupTimeout,
		ControlPlaneStopTimeout:  util.StopTimeout,
	}
	if err := os.Mkdir(filepath.Join(dir, "apiserver"), 0o700); err != nil {
		t.Fatal(err)
	}
	env.ControlPlane.Etcd.Configure().Set("log-level", "warn")
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting etcd and kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if _, err := framework.InstallGantryCRDs(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	const ns = "tenant"
	setUp(ctx, t, cfg, wrappers.MakeMetadataPolicy("reject-all", ns).Rule(policyv1alpha1.PolicyPredicate{}, rejectIt).Obj(),
		func(i int) *v1.Pod { return pod(ns, fmt.Sprintf("probe-%d", i)) })

	srv := env.ControlPlane.APIServer
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- srv.Start() }()

	short := *cfg
	short.Timeout = 2 * time.Second
	sc := kubernetes.NewForConfigOrDie(&short)
	var firstOK time.Time
	var admitted, rejected, failed int
	failures := map[string]int{}
	for i := 0; ; i++ {
		if firstOK.IsZero() {
			if err := sc.Discovery().RESTClient().Get().AbsPath("/healthz").Do(ctx).Error(); err == nil {
				firstOK = time.Now()
			}
		} else if time.Since(firstOK) > 5*time.Second {
			break
		}
		_, err := sc.CoreV1().Pods(ns).Create(ctx, pod(ns, fmt.Sprintf("p-%d", i)), metav1.CreateOptions{})
		switch {
		case err == nil:
			admitted++
			t.Errorf("pod p-%d admitted %v after the first /healthz OK", i, time.Since(firstOK))
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "MetadataPolicy tenant/reject-all"):
			rejected++
		default:
			failed++
			msg := err.Error()
			if len(msg) > 80 {
				msg = msg[:80]
			}
			failures[msg]++
		}
		if i > 100000 {
			t.Fatal("the restarted kube-apiserver never answered /healthz")
		}
	}
	if err := <-started; err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	t.Logf("%d pods admitted, %d rejected by the policy, %d failed otherwise: %v", admitted, rejected, failed, failures)
	if rejected == 0 {
		t.Error("no pod was rejected by the policy after the restart: the loop did not reach the plugin")
	}
}
