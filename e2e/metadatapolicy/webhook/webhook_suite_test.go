// Package webhook runs the MetadataPolicy and QoS annotator e2e specs
// against gantry-webhook, registered as a real MutatingWebhookConfiguration
// and ValidatingWebhookConfiguration, on a cluster whose kube-apiserver has
// the in-process plugins disabled.
package webhook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/qos"
	"github.com/gantry-dev/gantry/admission/webhook"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/e2e/metadatapolicy/specs"
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
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsPort))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		_, statErr := os.Stat(filepath.Join(certs, webhook.CAFile))
		return resp.StatusCode == http.StatusOK && statErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("gantry-webhook did not become ready (see %s): %w", log.Name(), err)
	}
	url := func(path string) *string { return ptr.To("https://" + webhook.HostPort("127.0.0.1", port) + path) }
	system := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "kube-public", "kube-node-lease"}},
		// Namespaces labelled skipWebhookLabel=true bypass the webhook: the
		// latency spec measures "plugins off" there.
		{Key: skipWebhookLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}},
	}}
	sideEffects := admissionregistrationv1.SideEffectClassNoneOnDryRun
	fail := admissionregistrationv1.Fail
	_, err = tc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: configName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mutate.gantry.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: url(webhook.MutatePath)},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       system,
			FailurePolicy:           &fail,
			SideEffects:             &sideEffects,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	none := admissionregistrationv1.SideEffectClassNone
	_, err = tc.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: configName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate-policy.gantry.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: url(webhook.ValidatePolicyPath)},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{policyv1alpha1.GroupName}, APIVersions: []string{"v1alpha1"}, Resources: []string{"metadatapolicies", "clustermetadatapolicies"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	// Wait until the CA bundle was injected into both configurations.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
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
