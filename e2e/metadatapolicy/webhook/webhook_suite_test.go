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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/qos"
	"github.com/gantry-dev/gantry/admission/webhook"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/e2e/metadatapolicy/specs"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestWebhook(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry MetadataPolicy suite (webhook)")
}

// configName names both webhook configurations.
const configName = "gantry-webhook-e2e"

// skipWebhookLabel on a namespace keeps its requests from the webhook.
const skipWebhookLabel = "e2e.gantry.dev/skip-webhook"

var (
	_ = framework.SetupSuite(
		framework.WithCluster("gantry-webhook", "disable-admission-plugins="+qos.PluginName+","+metadatapolicy.PluginName),
		framework.WithSetup(startWebhook),
	)
	_ = specs.Register("webhook")
)

// startWebhook runs gantry-webhook from the build output against the suite's
// cluster and registers it.
func startWebhook(ctx context.Context) error {
	tc := framework.TestContext
	port, metricsPort := freePort(), freePort()
	dir := filepath.Join(tc.Artifacts, "gantry-webhook")
	certs := filepath.Join(dir, "certs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.RemoveAll(certs)
	log, err := os.Create(filepath.Join(dir, "gantry-webhook.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(tc.Root, "_output", "bin", "gantry-webhook"),
		"--kubeconfig="+tc.Kubeconfig, "--bind-address=127.0.0.1", "--port="+strconv.Itoa(port),
		"--cert-dir="+certs, "--tls-san=127.0.0.1",
		"--mutating-webhook-configuration="+configName, "--validating-webhook-configuration="+configName,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort), "--v=2")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting gantry-webhook (run make build): %w", err)
	}
	ginkgo.DeferCleanup(func(ctx context.Context) error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
		_ = log.Close()
		if tc.OwnCluster {
			return nil // the cluster, and the configurations with it, are gone
		}
		return deleteConfigs(ctx)
	})

	// The specs prove the webhook only if the API server's own plugins are
	// off: a dry-run pod must come back without the QoS annotation.
	dry, err := tc.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, wrappers.MakePod("probe", metav1.NamespaceDefault).Obj(),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return err
	}
	if v, ok := dry.Annotations[qos.Annotation]; ok {
		return fmt.Errorf("kube-apiserver runs Gantry's in-process plugins (a pod got %s=%s): the webhook suite needs them disabled", qos.Annotation, v)
	}

	// The webhook writes its CA and injects it into the configurations
	// created below; wait until it serves and has loaded policies.
	err = util.Poll(ctx, util.LongTimeout, "gantry-webhook ready (see "+log.Name()+")", func(ctx context.Context) (bool, error) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsPort))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		_, statErr := os.Stat(filepath.Join(certs, webhook.CAFile))
		return resp.StatusCode == http.StatusOK && statErr == nil, nil
	})
	if err != nil {
		return err
	}
	mutating, validating, err := shippedConfigs(filepath.Join(tc.Root, "admission", "config", "webhooks.yaml"), webhook.HostPort("127.0.0.1", port))
	if err != nil {
		return err
	}
	if _, err := tc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := tc.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		return err
	}
	// Wait until the CA bundle was injected into both configurations.
	return util.Poll(ctx, util.LongTimeout, "the webhook's CA injected into both configurations", func(ctx context.Context) (bool, error) {
		m, err := tc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v, err := tc.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return len(m.Webhooks[0].ClientConfig.CABundle) > 0 && len(v.Webhooks[0].ClientConfig.CABundle) > 0, nil
	})
}

// shippedConfigs reads the webhook configurations Gantry ships
// (admission/config/webhooks.yaml) and points them at the webhook process
// at hostPort: each webhook's clientConfig becomes a URL with the service's
// path, both configurations are named configName, and the mutating
// webhook's namespace selector also skips namespaces labelled
// skipWebhookLabel=true (the latency spec measures "plugins off" there).
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
	if mutating == nil || validating == nil || len(mutating.Webhooks) != 1 || len(validating.Webhooks) != 1 {
		return nil, nil, fmt.Errorf("%s: want one MutatingWebhookConfiguration and one ValidatingWebhookConfiguration of one webhook each", file)
	}
	url := func(c *admissionregistrationv1.WebhookClientConfig, servedPath string) error {
		if c.Service == nil || c.Service.Path == nil || *c.Service.Path != servedPath {
			return fmt.Errorf("%s: a webhook's clientConfig is not the service path %s gantry-webhook serves", file, servedPath)
		}
		c.URL, c.Service = ptr.To("https://"+hostPort+servedPath), nil
		return nil
	}
	mutating.Name, validating.Name = configName, configName
	m := &mutating.Webhooks[0]
	if err := url(&m.ClientConfig, webhook.MutatePath); err != nil {
		return nil, nil, err
	}
	if err := url(&validating.Webhooks[0].ClientConfig, webhook.ValidatePolicyPath); err != nil {
		return nil, nil, err
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	m.NamespaceSelector.MatchExpressions = append(m.NamespaceSelector.MatchExpressions,
		metav1.LabelSelectorRequirement{Key: skipWebhookLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}})
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

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
