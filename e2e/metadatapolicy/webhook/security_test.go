package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	admissionmetrics "github.com/gantry-dev/gantry/admission/metrics"
	"github.com/gantry-dev/gantry/admission/qos"
	"github.com/gantry-dev/gantry/admission/webhook"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/wrappers"
)

const (
	// loadPods pod creates, from loadWorkers goroutines, go through the two
	// replicas.
	loadPods    = 500
	loadWorkers = 20
	// recoveryLimit is how long pod creates may fail after the CA bundles
	// were wiped.
	recoveryLimit = 30 * time.Second
)

// These specs run the webhook as shipped: two replicas sharing one
// certificate Secret behind a stand-in for the Service. They are Serial:
// wiping the CA bundles refuses every other spec's pod creates meanwhile.
var _ = framework.Describe("gantry-webhook as shipped", ginkgo.Label(framework.LabelMetadataPolicy, framework.LabelWebhook, framework.LabelSecurity), ginkgo.Serial, func() {
	f := framework.NewFramework("webhook-replicas")

	ginkgo.It("serves 500 pod creates without a failure, and each replica answers a review checked against the shared CA", func(ctx ginkgo.SpecContext) {
		tc := framework.TestContext
		metrics := metricsClient(ctx)
		ensureMetricsReaderRole(ctx)
		reader := serviceAccountToken(ctx, f.Namespace, "load-metrics", "gantry-webhook-metrics-reader")
		var before []float64
		// RBAC reaches the replicas' authorizer through an informer.
		framework.Eventually(ctx, func(g gomega.Gomega) {
			before = served(ctx, g, metrics, reader)
		}).Should(gomega.Succeed())
		var failures, unannotated atomic.Int64
		var mu sync.Mutex
		var errs []error
		jobs := make(chan int)
		var wg sync.WaitGroup
		start := time.Now()
		for range loadWorkers {
			wg.Go(func() {
				for i := range jobs {
					p, err := tc.Client.CoreV1().Pods(f.Namespace).Create(ctx, wrappers.MakePod(fmt.Sprintf("load-%03d", i), f.Namespace).Obj(), metav1.CreateOptions{})
					if err != nil {
						failures.Add(1)
						mu.Lock()
						if len(errs) < 5 {
							errs = append(errs, err)
						}
						mu.Unlock()
						continue
					}
					if _, ok := p.Annotations[qos.Annotation]; !ok {
						unannotated.Add(1)
					}
				}
			})
		}
		for i := range loadPods {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		elapsed := time.Since(start)
		after := served(ctx, gomega.Default, metrics, reader)
		report := fmt.Sprintf("%d pod creates (%d in parallel) through 2 gantry-webhook replicas: %d failures, %s (%.0f creates/s); requests reviewed per replica: %.0f, %.0f\n",
			loadPods, loadWorkers, failures.Load(), elapsed.Round(time.Millisecond), float64(loadPods)/elapsed.Seconds(), after[0]-before[0], after[1]-before[1])
		ginkgo.AddReportEntry("webhook replicas under load", report)
		fmt.Fprint(ginkgo.GinkgoWriter, report)
		_, _ = fmt.Print(report)

		gomega.Expect(failures.Load()).To(gomega.BeZero(), "failed pod creates, the first ones: %v", errors.Join(errs...))
		gomega.Expect(unannotated.Load()).To(gomega.BeZero(), "pods created without the webhook's QoS annotation")
		var reviewed float64
		for i := range after {
			reviewed += after[i] - before[i]
		}
		gomega.Expect(reviewed).To(gomega.BeNumerically(">=", loadPods), "the replicas together reviewed fewer requests than there were pod creates")

		// How kube-apiserver spreads the creates over the replicas is its
		// connection reuse and the Service's choice per connection, not
		// Gantry's: one connection may carry all of them. So each replica
		// is sent a review directly, over TLS checked against the CA
		// kube-apiserver trusts, and must answer it as the Service would.
		ginkgo.By("reviewing a pod create at each replica directly")
		for i, r := range replicas {
			gomega.Expect(r.reviewPodCreate(ctx, metrics, f.Namespace, fmt.Sprintf("direct-%d", i))).To(gomega.Succeed())
		}
		direct := served(ctx, gomega.Default, metrics, reader)
		for i := range direct {
			gomega.Expect(direct[i]-after[i]).To(gomega.BeNumerically(">", 0), "%s did not count the review sent to it", replicas[i].name)
		}
	})

	ginkgo.It("restores wiped CA bundles: pod creates recover within 30s", func(ctx ginkgo.SpecContext) {
		tc := framework.TestContext
		ginkgo.By("wiping the caBundle of every webhook of both configurations")
		wiped := wipeCABundles(ctx)

		var restored time.Duration
		for time.Since(wiped) < 2*recoveryLimit {
			if !slices.ContainsFunc(caBundles(ctx, gomega.Default), func(b []byte) bool { return len(b) == 0 }) {
				restored = time.Since(wiped)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}

		var recovered time.Duration
		attempts, failed := 0, 0
		var lastErr error
		for recovered == 0 && time.Since(wiped) < 2*recoveryLimit {
			attempts++
			p, err := tc.Client.CoreV1().Pods(f.Namespace).Create(ctx, wrappers.MakePod(fmt.Sprintf("recover-%03d", attempts), f.Namespace).Obj(), metav1.CreateOptions{})
			if err == nil && p.Annotations[qos.Annotation] != "" {
				recovered = time.Since(wiped)
				break
			}
			failed++
			lastErr = err
			time.Sleep(100 * time.Millisecond)
		}
		report := fmt.Sprintf("caBundle wiped from both configurations: bundles back after %s, pod creates recovered after %s (%d of %d attempts failed)\n",
			restored.Round(time.Millisecond), recovered.Round(time.Millisecond), failed, attempts)
		ginkgo.AddReportEntry("caBundle recovery", report)
		fmt.Fprint(ginkgo.GinkgoWriter, report)
		_, _ = fmt.Print(report)
		gomega.Expect(recovered).To(gomega.And(gomega.BeNumerically(">", 0), gomega.BeNumerically("<", recoveryLimit)),
			"pod creates did not recover within %s; last error: %v", recoveryLimit, lastErr)

		ginkgo.By("checking that every bundle is the shared Secret's CA and both replicas are ready")
		secret, err := tc.Client.CoreV1().Secrets(certSecretNamespace).Get(ctx, certSecretName, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		framework.Eventually(ctx, func(g gomega.Gomega) {
			for _, b := range caBundles(ctx, g) {
				g.Expect(b).To(gomega.Equal(secret.Data[webhook.CAFile]))
			}
			for _, r := range replicas {
				code, reason := r.readyz()
				g.Expect(code).To(gomega.Equal(http.StatusOK), "%s: %s", r.name, reason)
			}
		}).Should(gomega.Succeed())
	})

	ginkgo.It("replaces an expired certificate in the Secret, and every replica serves the new one without a restart", func(ctx ginkgo.SpecContext) {
		tc := framework.TestContext
		secrets := tc.Client.CoreV1().Secrets(certSecretNamespace)
		ginkgo.By("writing an expired certificate for 127.0.0.1 into the shared Secret")
		expiredCert, expiredKey := expiredCertificate()
		gomega.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := secrets.Get(ctx, certSecretName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Data[webhook.CertFile], s.Data[webhook.KeyFile], s.Data[webhook.CAFile] = expiredCert, expiredKey, expiredCert
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
			return err
		})).To(gomega.Succeed())
		written := time.Now()

		var secret *v1.Secret
		framework.Eventually(ctx, func(g gomega.Gomega) {
			var err error
			secret, err = secrets.Get(ctx, certSecretName, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(secret.Data[webhook.CertFile]).NotTo(gomega.Equal(expiredCert), "the expired certificate is still in the Secret")
			for _, r := range replicas {
				g.Expect(servedCertificate(r)).To(gomega.Equal(firstPEMBlock(secret.Data[webhook.CertFile])), "%s does not serve the Secret's certificate", r.name)
			}
			for _, b := range caBundles(ctx, g) {
				g.Expect(b).To(gomega.Equal(secret.Data[webhook.CAFile]))
			}
		}).WithTimeout(recoveryLimit).Should(gomega.Succeed())
		report := fmt.Sprintf("expired certificate written into the Secret: replaced, served by both replicas and its CA injected after %s\n", time.Since(written).Round(time.Millisecond))
		ginkgo.AddReportEntry("certificate replacement", report)
		fmt.Fprint(ginkgo.GinkgoWriter, report)
		_, _ = fmt.Print(report)

		leaf, err := x509.ParseCertificate(firstPEMBlock(secret.Data[webhook.CertFile]))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(leaf.NotAfter).To(gomega.BeTemporally(">", time.Now().Add(24*time.Hour)))
		framework.Eventually(ctx, func() error {
			_, err := tc.Client.CoreV1().Pods(f.Namespace).Create(ctx, wrappers.MakePod("after-rotation-"+strconv.FormatInt(time.Now().UnixNano(), 36), f.Namespace).Obj(), metav1.CreateOptions{})
			return err
		}).Should(gomega.Succeed())
	})

	ginkgo.It("serves metrics only to authenticated and authorized clients", func(ctx ginkgo.SpecContext) {
		client := metricsClient(ctx)
		ensureMetricsReaderRole(ctx)
		noRole := serviceAccountToken(ctx, f.Namespace, "no-metrics", "")
		reader := serviceAccountToken(ctx, f.Namespace, "metrics-reader", "gantry-webhook-metrics-reader")
		admin := serviceAccountToken(ctx, f.Namespace, "admin", "cluster-admin")

		get := func(r *replica, token string) int {
			code, _, err := r.getMetrics(ctx, client, token)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			return code
		}
		for _, r := range replicas {
			gomega.Expect(get(r, "")).To(gomega.Equal(http.StatusUnauthorized), "%s, no token", r.name)
			gomega.Expect(get(r, "not-a-token")).To(gomega.Equal(http.StatusUnauthorized), "%s, a forged token", r.name)
			gomega.Expect(get(r, noRole)).To(gomega.Equal(http.StatusForbidden), "%s, a ServiceAccount without the metrics role", r.name)
			for who, token := range map[string]string{"gantry-webhook-metrics-reader": reader, "cluster-admin": admin} {
				// RBAC reaches the authorizer through an informer.
				framework.Eventually(ctx, func(g gomega.Gomega) {
					code, body, err := r.getMetrics(ctx, client, token)
					g.Expect(err).NotTo(gomega.HaveOccurred())
					g.Expect(code).To(gomega.Equal(http.StatusOK), "%s, %s", r.name, who)
					g.Expect(body).To(gomega.ContainSubstring("# TYPE "))
				}).Should(gomega.Succeed())
			}
		}
	})
})

// metricsClient is an HTTPS client for the replicas' metrics that trusts
// the CA of their certificate Secret as it is now, and checks the name
// their certificate is for.
func metricsClient(ctx context.Context) *http.Client {
	ginkgo.GinkgoHelper()
	secret, err := framework.TestContext.Client.CoreV1().Secrets(certSecretNamespace).Get(ctx, certSecretName, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	roots := x509.NewCertPool()
	gomega.Expect(roots.AppendCertsFromPEM(secret.Data[webhook.CAFile])).To(gomega.BeTrue(), "the Secret's CA")
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: replicas[0].serverName, MinVersion: tls.VersionTLS12}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
}

// getMetrics GETs the replica's /metrics, with a bearer token unless it is
// "", and returns the status code and the body.
func (r *replica) getMetrics(ctx context.Context, client *http.Client, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", r.metricsPort), nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", r.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(body), err
}

// served is, for each replica, how many requests its mutating webhook has
// reviewed (the count of its gantry_admission_duration_seconds), read with
// a token allowed GET /metrics.
func served(ctx context.Context, g gomega.Gomega, client *http.Client, token string) []float64 {
	out := make([]float64, len(replicas))
	for i, r := range replicas {
		code, body, err := r.getMetrics(ctx, client, token)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(code).To(gomega.Equal(http.StatusOK), "%s: GET /metrics: %s", r.name, body)
		m, err := framework.ParseMetrics(body)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		out[i] = m.Value("gantry_admission_duration_seconds_count", "deployment", admissionmetrics.Webhook, "plugin", metadatapolicy.PluginName)
	}
	return out
}

// reviewPodCreate sends the replica's /mutate the AdmissionReview of a pod
// create, as kube-apiserver would, over client (which trusts the
// replicas' CA and checks the name their certificate is for), and fails
// unless the replica allows it and adds the QoS annotation.
func (r *replica) reviewPodCreate(ctx context.Context, client *http.Client, namespace, name string) error {
	raw, err := json.Marshal(wrappers.MakePod(name, namespace).Obj())
	if err != nil {
		return err
	}
	uid := types.UID(fmt.Sprintf("e2e-direct-%s-%d", name, time.Now().UnixNano()))
	pods := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: uid, Kind: podKind, Resource: pods, RequestKind: &podKind, RequestResource: &pods,
			Name: name, Namespace: namespace, Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: "gantry-e2e"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+webhook.HostPort("127.0.0.1", r.port)+webhook.MutatePath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: POST %s: %s: %s", r.name, webhook.MutatePath, resp.Status, out)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &review); err != nil {
		return fmt.Errorf("%s: decoding the AdmissionReview: %w", r.name, err)
	}
	switch rr := review.Response; {
	case rr == nil:
		return fmt.Errorf("%s: no response in %s", r.name, out)
	case rr.UID != uid:
		return fmt.Errorf("%s: the response is for request %q, not %q", r.name, rr.UID, uid)
	case !rr.Allowed:
		return fmt.Errorf("%s: denied the pod create: %v", r.name, rr.Result)
	case !patchAddsAnnotation(rr.Patch, qos.Annotation):
		return fmt.Errorf("%s: no %s annotation in the patch %s", r.name, qos.Annotation, rr.Patch)
	}
	return nil
}

// patchAddsAnnotation reports whether a JSON patch adds or replaces the
// annotation key, either as the whole annotations map or as one entry.
func patchAddsAnnotation(patch []byte, key string) bool {
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if json.Unmarshal(patch, &ops) != nil {
		return false
	}
	entry := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
	for _, op := range ops {
		if op.Op != "add" && op.Op != "replace" {
			continue
		}
		if op.Path == entry {
			return true
		}
		var m map[string]string
		if op.Path == "/metadata/annotations" && json.Unmarshal(op.Value, &m) == nil {
			if _, ok := m[key]; ok {
				return true
			}
		}
	}
	return false
}

// wipeCABundles removes the CA bundle of every webhook of both
// configurations, as a GitOps tool re-applying the manifests would, and
// returns when the second configuration was written.
func wipeCABundles(ctx context.Context) time.Time {
	ginkgo.GinkgoHelper()
	c := framework.TestContext.Client.AdmissionregistrationV1()
	gomega.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m, err := c.MutatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range m.Webhooks {
			m.Webhooks[i].ClientConfig.CABundle = nil
		}
		_, err = c.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
		return err
	})).To(gomega.Succeed())
	gomega.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v, err := c.ValidatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range v.Webhooks {
			v.Webhooks[i].ClientConfig.CABundle = nil
		}
		_, err = c.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
		return err
	})).To(gomega.Succeed())
	return time.Now()
}

// caBundles are the bundles of every webhook of both configurations.
func caBundles(ctx context.Context, g gomega.Gomega) [][]byte {
	c := framework.TestContext.Client.AdmissionregistrationV1()
	m, err := c.MutatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	v, err := c.ValidatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var bundles [][]byte
	for _, w := range m.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	return bundles
}

// ensureMetricsReaderRole creates the shipped gantry-webhook-metrics-reader
// ClusterRole (admission/config/rbac.yaml) unless it is there.
func ensureMetricsReaderRole(ctx context.Context) {
	ginkgo.GinkgoHelper()
	tc := framework.TestContext
	data, err := os.ReadFile(filepath.Join(tc.Root, "admission", "config", "rbac.yaml"))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj unstructured.Unstructured
		err := decoder.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if obj.GetKind() != "ClusterRole" || obj.GetName() != "gantry-webhook-metrics-reader" {
			continue
		}
		var role rbacv1.ClusterRole
		gomega.Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, &role, true)).To(gomega.Succeed())
		_, err = tc.Client.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return
		}
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) error {
			return tc.Client.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
		})
		return
	}
	ginkgo.Fail("admission/config/rbac.yaml has no ClusterRole gantry-webhook-metrics-reader")
}

// serviceAccountToken makes a ServiceAccount in ns, bound to clusterRole
// cluster-wide unless it is "", and returns a token for it.
func serviceAccountToken(ctx context.Context, ns, name, clusterRole string) string {
	ginkgo.GinkgoHelper()
	c := framework.TestContext.Client
	_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	if clusterRole != "" {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		}
		_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) error {
			return c.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		})
	}
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return tr.Status.Token
}

// expiredCertificate is a self-signed certificate for 127.0.0.1 that
// expired a day ago, and its key, PEM.
func expiredCertificate() (certPEM, keyPEM []byte) {
	ginkgo.GinkgoHelper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "expired"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	keyDER, err := x509.MarshalECPrivateKey(key)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// servedCertificate is the DER leaf certificate the replica's webhook port
// presents (not verified: any is accepted).
func servedCertificate(r *replica) []byte {
	conn, err := tls.Dial("tcp", webhook.HostPort("127.0.0.1", r.port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads what is served
	if err != nil {
		return nil
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// firstPEMBlock is the DER of the first PEM block of data.
func firstPEMBlock(data []byte) []byte {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil
	}
	return block.Bytes
}
