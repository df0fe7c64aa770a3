// Package webhook runs the MetadataPolicy and QoS annotator e2e specs
// against gantry-webhook, registered as a real MutatingWebhookConfiguration
// and ValidatingWebhookConfiguration, on a cluster whose kube-apiserver has
// the in-process plugins disabled.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/qos"
	"github.com/gantry-dev/gantry/admission/webhook"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/e2e/metadatapolicy/specs"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestWebhook(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry MetadataPolicy suite (webhook)")
}

// configName names both webhook configurations. On a cluster whose
// kube-apiserver runs on this machine (the local runtime) it is not the
// shipped name, so that the manifests spec's dry run does not merge into
// them; shippedIdentity renames them in the shipped RBAC to match. Where
// the suite deploys the shipped manifests, it is the shipped name.
var configName = "gantry-webhook-e2e"

// skipWebhookLabel on a namespace keeps its requests from the webhook.
const skipWebhookLabel = "e2e.gantry.dev/skip-webhook"

var (
	_ = framework.SetupSuite(
		framework.WithCluster("gantry-webhook", "disable-admission-plugins="+qos.PluginName+","+metadatapolicy.PluginName),
		// The specs' pods (500 of them in one) belong on kwok nodes, not
		// pulling images on a kind cluster's workers.
		framework.WithFakeNodesOnly(),
		framework.WithSetup(startWebhook),
	)
	_ = specs.Register(framework.LabelWebhook)
)

// certSecretNamespace holds the replicas' shared certificate Secret:
// gantry-system where the suite deploys the shipped manifests; a namespace
// of the suite's own for replicas run as processes, so that the manifests
// spec may create and delete gantry-system.
var certSecretNamespace = "gantry-webhook-e2e"

// certSecretName is the shipped Deployment's certificate Secret.
const certSecretName = "gantry-webhook-cert"

// replica is one gantry-webhook replica, a process of this machine or a
// pod of the shipped Deployment, and its three servers as this process
// reaches them on 127.0.0.1 (a pod's through a port-forward).
type replica struct {
	name                          string
	port, metricsPort, healthPort int
	// serverName is what its serving certificate is for.
	serverName string
	log        string
	// secret is its certificate Secret's name.
	secret string
}

// ownSecretsEnv, set to true, gives each replica a certificate Secret of
// its own: the broken configuration of security review finding 5 (each
// replica its own CA, each injecting it). The "as shipped" specs must then
// fail; it shows that they can. Replicas run as processes only.
const ownSecretsEnv = "GANTRY_E2E_WEBHOOK_OWN_SECRETS"

// replicas are the shipped Deployment's two: on a local cluster, two
// processes behind proxy, which stands in for the Service (the
// configurations' URLs point at it); elsewhere, the Deployment's pods.
var replicas []*replica

// startWebhook checks that kube-apiserver's own plugins are off, then
// runs gantry-webhook as processes next to a local cluster's
// kube-apiserver, or deploys the shipped manifests on any other cluster,
// and returns when both replicas are ready.
func startWebhook(ctx context.Context) error {
	tc := framework.TestContext
	// The specs prove the webhook only if the API server's own plugins are
	// off: a dry-run pod must come back without the QoS annotation.
	dry, err := tc.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, wrappers.MakePod("probe", metav1.NamespaceDefault).Obj(),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return err
	}
	// On a stock control plane the annotation is the installed webhook's.
	if v, ok := dry.Annotations[qos.Annotation]; ok && tc.ControlPlane != cluster.ControlPlaneStock {
		return fmt.Errorf("kube-apiserver runs Gantry's in-process plugins (a pod got %s=%s): the webhook suite needs them disabled", qos.Annotation, v)
	}
	dir := filepath.Join(tc.Artifacts, "gantry-webhook")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if framework.HostProcesses() {
		err = startProcesses(ctx, dir)
	} else {
		err = deployWebhook(ctx, dir)
	}
	if err != nil {
		return err
	}
	for _, r := range replicas {
		err := util.Poll(ctx, util.LongTimeout, fmt.Sprintf("gantry-webhook %s ready (see %s)", r.name, r.log), func(ctx context.Context) (bool, error) {
			code, _ := r.readyz()
			if os.Getenv(ownSecretsEnv) == "true" {
				// Replicas with CAs of their own are never both ready: let
				// the specs show what that does.
				return code != 0, nil
			}
			return code == http.StatusOK, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// startProcesses runs two gantry-webhook processes from the build output
// against the suite's cluster, configured as the shipped Deployment's
// replicas (one certificate Secret, CA injection into both
// configurations), behind a round-robin TCP proxy, and registers the
// shipped webhook configurations pointing at the proxy.
func startProcesses(ctx context.Context, dir string) error {
	tc := framework.TestContext
	if _, err := tc.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: certSecretNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// A Secret left by an earlier run against the same cluster is reused
	// (its certificate is valid for 127.0.0.1) or replaced.
	for i := range 2 {
		r := &replica{name: fmt.Sprintf("replica %d", i), port: freePort(), metricsPort: freePort(), healthPort: freePort(), serverName: "127.0.0.1",
			log: filepath.Join(dir, fmt.Sprintf("gantry-webhook-%d.log", i)), secret: certSecretName}
		if os.Getenv(ownSecretsEnv) == "true" {
			r.secret = fmt.Sprintf("%s-%d", certSecretName, i)
		}
		replicas = append(replicas, r)
	}
	proxy, err := startProxy(webhook.HostPort("127.0.0.1", replicas[0].port), webhook.HostPort("127.0.0.1", replicas[1].port))
	if err != nil {
		return err
	}
	ginkgo.DeferCleanup(proxy.Close)

	// The configurations come first, without a CA bundle: the replicas
	// inject it, and are ready only once it is there.
	if err := createConfigs(ctx, proxy.Addr()); err != nil {
		return err
	}
	kubeconfig, err := shippedIdentity(ctx, filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return err
	}
	for _, r := range replicas {
		if err := r.start(kubeconfig); err != nil {
			return err
		}
	}
	return nil
}

// createConfigs registers the shipped webhook configurations (see
// shippedConfigs) and deletes them after the suite unless the cluster goes
// with it.
func createConfigs(ctx context.Context, hostPort string) error {
	tc := framework.TestContext
	mutating, validating, err := shippedConfigs(filepath.Join(tc.Root, "admission", "config", "webhooks.yaml"), hostPort)
	if err != nil {
		return err
	}
	if _, err := tc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := tc.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		return err
	}
	ginkgo.DeferCleanup(func(ctx context.Context) error {
		if tc.OwnCluster {
			return nil // the cluster, and the configurations with it, are gone
		}
		return deleteConfigs(ctx)
	})
	return nil
}

// start runs the replica with the shipped Deployment's flags and identity
// (kubeconfig), but listening on 127.0.0.1 ports and with a certificate for
// 127.0.0.1 (the proxy's address) in the suite's namespace.
func (r *replica) start(kubeconfig string) error {
	tc := framework.TestContext
	log, err := os.Create(r.log)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(tc.Root, "_output", "bin", "gantry-webhook"),
		"--kubeconfig="+kubeconfig, "--bind-address=127.0.0.1", "--port="+strconv.Itoa(r.port),
		"--cert-secret="+certSecretNamespace+"/"+r.secret, "--tls-san=127.0.0.1",
		"--mutating-webhook-configuration="+configName, "--validating-webhook-configuration="+configName,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(r.metricsPort),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(r.healthPort), "--v=2",
		// No Service and no node proxy to drain: the suite's proxy stops
		// with the replicas.
		"--shutdown-delay=1s")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting gantry-webhook (run make build): %w", err)
	}
	ginkgo.DeferCleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
		_ = log.Close()
	})
	return nil
}

// shippedIdentity creates the ServiceAccount and RBAC of
// admission/config/rbac.yaml, in certSecretNamespace instead of
// gantry-system and for the configurations named configName, and writes a kubeconfig for a token of that ServiceAccount
// to file: the replicas get exactly the shipped rights.
func shippedIdentity(ctx context.Context, file string) (string, error) {
	tc := framework.TestContext
	data, err := os.ReadFile(filepath.Join(tc.Root, "admission", "config", "rbac.yaml"))
	if err != nil {
		return "", err
	}
	dyn, err := dynamic.NewForConfig(tc.Config)
	if err != nil {
		return "", err
	}
	resources := map[string]schema.GroupVersionResource{
		"ServiceAccount":     v1.SchemeGroupVersion.WithResource("serviceaccounts"),
		"ClusterRole":        rbacv1.SchemeGroupVersion.WithResource("clusterroles"),
		"ClusterRoleBinding": rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"),
		"Role":               rbacv1.SchemeGroupVersion.WithResource("roles"),
		"RoleBinding":        rbacv1.SchemeGroupVersion.WithResource("rolebindings"),
	}
	var serviceAccount string
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj unstructured.Unstructured
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("rbac.yaml: %w", err)
		}
		if k := obj.GetKind(); k == "ValidatingAdmissionPolicy" || k == "ValidatingAdmissionPolicyBinding" {
			// gantry-webhook-secret-create confines gantry-system's
			// ServiceAccount, not this suite's (config/integration tests
			// it); the suite's replicas may use other Secret names.
			continue
		}
		gvr, ok := resources[obj.GetKind()]
		if !ok {
			return "", fmt.Errorf("rbac.yaml: unexpected %s", obj.GetKind())
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		switch obj.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding":
			obj.SetNamespace(certSecretNamespace)
			ri = dyn.Resource(gvr).Namespace(certSecretNamespace)
		}
		if obj.GetKind() == "ServiceAccount" {
			serviceAccount = obj.GetName()
		}
		if rules, ok, _ := unstructured.NestedSlice(obj.Object, "rules"); ok {
			for _, rule := range rules {
				rule := rule.(map[string]any)
				if groups, _, _ := unstructured.NestedStringSlice(rule, "apiGroups"); slices.Contains(groups, admissionregistrationv1.GroupName) {
					rule["resourceNames"] = []any{configName}
				}
				if names, ok, _ := unstructured.NestedStringSlice(rule, "resourceNames"); ok && slices.Contains(names, certSecretName) && os.Getenv(ownSecretsEnv) == "true" {
					rule["resourceNames"] = []any{certSecretName + "-0", certSecretName + "-1"}
				}
			}
			_ = unstructured.SetNestedSlice(obj.Object, rules, "rules")
		}
		if subjects, ok, _ := unstructured.NestedSlice(obj.Object, "subjects"); ok {
			for _, sub := range subjects {
				sub.(map[string]any)["namespace"] = certSecretNamespace
			}
			_ = unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
		}
		if _, err := ri.Create(ctx, &obj, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			existing, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			obj.SetResourceVersion(existing.GetResourceVersion())
			if _, err := ri.Update(ctx, &obj, metav1.UpdateOptions{}); err != nil {
				return "", err
			}
		} else if err != nil {
			return "", fmt.Errorf("creating %s %s of rbac.yaml: %w", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetNamespace() == "" && !tc.OwnCluster {
			ginkgo.DeferCleanup(func(ctx context.Context) error {
				if err := ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
				return nil
			})
		}
	}
	tr, err := tc.Client.CoreV1().ServiceAccounts(certSecretNamespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](6 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	cluster := &clientcmdapi.Cluster{Server: tc.Config.Host, CertificateAuthority: tc.Config.CAFile, CertificateAuthorityData: tc.Config.CAData}
	config := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"e2e": cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{serviceAccount: {Token: tr.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"e2e": {Cluster: "e2e", AuthInfo: serviceAccount}},
		CurrentContext: "e2e",
	}
	return file, clientcmd.WriteToFile(config, file)
}

// readyz is the replica's readiness: the status code and the reason.
func (r *replica) readyz() (int, string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", r.healthPort))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body)
}

// shippedConfigs reads the webhook configurations Gantry ships
// (admission/config/webhooks.yaml), points them at the webhook process
// at hostPort unless it is "" (each webhook's clientConfig becomes a URL
// with the service's path; "" keeps the shipped Service), names both
// configurations configName, and makes the namespace selectors of the
// webhooks for pods also skip namespaces labelled skipWebhookLabel=true (the latency spec measures "plugins off" there).
// Rules, selectors, failure policy, side effects and timeouts stay as
// shipped.
func shippedConfigs(file, hostPort string) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var mutating *admissionregistrationv1.MutatingWebhookConfiguration
	var validating *admissionregistrationv1.ValidatingWebhookConfiguration
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj unstructured.Unstructured
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		switch obj.GetKind() {
		case "MutatingWebhookConfiguration":
			mutating = &admissionregistrationv1.MutatingWebhookConfiguration{}
			err = runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, mutating, true)
		case "ValidatingWebhookConfiguration":
			validating = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			err = runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, validating, true)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %w", file, obj.GetKind(), err)
		}
	}
	if mutating == nil || validating == nil || len(mutating.Webhooks) == 0 || len(validating.Webhooks) == 0 {
		return nil, nil, fmt.Errorf("%s: want a MutatingWebhookConfiguration and a ValidatingWebhookConfiguration with webhooks", file)
	}
	url := func(name string, c *admissionregistrationv1.WebhookClientConfig) error {
		if c.Service == nil || c.Service.Path == nil {
			return fmt.Errorf("%s: webhook %s: clientConfig is not a service path gantry-webhook serves", file, name)
		}
		if hostPort != "" {
			c.URL, c.Service = ptr.To("https://"+hostPort+*c.Service.Path), nil
		}
		return nil
	}
	// skip adds skipWebhookLabel to the namespace selector of a webhook for
	// pods.
	skip := func(rules []admissionregistrationv1.RuleWithOperations, selector **metav1.LabelSelector) {
		if !slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool { return slices.Contains(r.Resources, "pods") }) {
			return
		}
		if *selector == nil {
			*selector = &metav1.LabelSelector{}
		}
		(*selector).MatchExpressions = append((*selector).MatchExpressions,
			metav1.LabelSelectorRequirement{Key: skipWebhookLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}})
	}
	mutating.Name, validating.Name = configName, configName
	for i := range mutating.Webhooks {
		w := &mutating.Webhooks[i]
		if err := url(w.Name, &w.ClientConfig); err != nil {
			return nil, nil, err
		}
		skip(w.Rules, &w.NamespaceSelector)
	}
	for i := range validating.Webhooks {
		w := &validating.Webhooks[i]
		if err := url(w.Name, &w.ClientConfig); err != nil {
			return nil, nil, err
		}
		skip(w.Rules, &w.NamespaceSelector)
	}
	return mutating, validating, nil
}

func deleteConfigs(ctx context.Context) error {
	c := framework.TestContext.Client.AdmissionregistrationV1()
	if err := c.MutatingWebhookConfigurations().Delete(ctx, configName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := c.ValidatingWebhookConfigurations().Delete(ctx, configName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// freePort is a port free on 127.0.0.1 now, for a replica to bind a little
// later. It is below the kernel's ephemeral range: a port from that range
// (what listening on port 0 gives) can be taken in the meantime as the
// local port of any outgoing connection on the machine, and the suites
// running in parallel make thousands (a replica once failed to start with
// "address already in use" that way).
func freePort() int {
	// The range's lower end; 32768 is Linux's default.
	ephemeral := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(raw)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				ephemeral = n
			}
		}
	}
	const lowest = 10000
	for range 100 {
		if ephemeral <= lowest {
			break
		}
		port := lowest + rand.IntN(ephemeral-lowest)
		if l, err := net.Listen("tcp", webhook.HostPort("127.0.0.1", port)); err == nil {
			_ = l.Close()
			return port
		}
	}
	// No room below the range: any free port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
