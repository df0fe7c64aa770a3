package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// File names in the certificate directory.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// BootstrapCertificates writes a self-signed CA and a serving certificate for
// hosts (DNS names or IPs) into dir, and returns the CA bundle (PEM). The CA
// key is never written: nothing else can be signed with it.
func BootstrapCertificates(dir string, hosts []string, validity time.Duration) ([]byte, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("self-signed bootstrap needs at least one host name or IP (--tls-san)")
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "gantry-webhook-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{
		CertFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CAFile:   caPEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return caPEM, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// InjectCABundle writes caBundle into every webhook of the named mutating
// and validating webhook configurations ("" skips one), waiting for them to
// exist: they may be applied after the webhook starts.
func InjectCABundle(ctx context.Context, client kubernetes.Interface, mutating, validating string, caBundle []byte) error {
	logger := klog.FromContext(ctx)
	admissionregistration := client.AdmissionregistrationV1()
	targets := []struct {
		kind, name string
		inject     func(context.Context) error
	}{
		{"MutatingWebhookConfiguration", mutating, func(ctx context.Context) error {
			c, err := admissionregistration.MutatingWebhookConfigurations().Get(ctx, mutating, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if setCABundles(len(c.Webhooks), func(i int) *[]byte { return &c.Webhooks[i].ClientConfig.CABundle }, caBundle) {
				_, err = admissionregistration.MutatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{})
			}
			return err
		}},
		{"ValidatingWebhookConfiguration", validating, func(ctx context.Context) error {
			c, err := admissionregistration.ValidatingWebhookConfigurations().Get(ctx, validating, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if setCABundles(len(c.Webhooks), func(i int) *[]byte { return &c.Webhooks[i].ClientConfig.CABundle }, caBundle) {
				_, err = admissionregistration.ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{})
			}
			return err
		}},
	}
	return wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		done := true
		for _, t := range targets {
			if t.name == "" {
				continue
			}
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return t.inject(ctx) }); err != nil {
				done = false
				if apierrors.IsNotFound(err) {
					logger.V(1).Info("Waiting for the webhook configuration to inject the CA bundle", "kind", t.kind, "name", t.name)
				} else {
					logger.Error(err, "Injecting the CA bundle", "kind", t.kind, "name", t.name)
				}
			}
		}
		return done, nil
	})
}

// setCABundles sets the n bundles bundle(i) to ca, reporting whether any
// changed.
func setCABundles(n int, bundle func(int) *[]byte, ca []byte) bool {
	changed := false
	for i := range n {
		if b := bundle(i); !bytes.Equal(*b, ca) {
			*b, changed = ca, true
		}
	}
	return changed
}
