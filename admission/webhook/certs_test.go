package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/gantry-dev/gantry/test/util"
)

var (
	testHosts = []string{"gantry-webhook.gantry-system.svc", "127.0.0.1"}
	testNow   = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
)

const (
	testNamespace = "gantry-system"
	testSecret    = "gantry-webhook-cert"
	testValidity  = 365 * 24 * time.Hour
)

func newRotator(client *fake.Clientset) *CertRotator {
	return &CertRotator{
		Client: client, Namespace: testNamespace, Name: testSecret, Hosts: testHosts,
		Validity: testValidity, RenewBefore: testValidity / 3, Now: func() time.Time { return testNow },
	}
}

func secretWith(p *keyPair) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: testNamespace}, Type: v1.SecretTypeTLS}
	setSecretData(s, p)
	return s
}

func mustKeyPair(t *testing.T, hosts []string, validity time.Duration, now time.Time, previousCA []byte) *keyPair {
	t.Helper()
	p, err := generateKeyPair(hosts, validity, now, previousCA)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGenerateKeyPair(t *testing.T) {
	p := mustKeyPair(t, testHosts, time.Hour, testNow, nil)
	c, err := parseKeyPair(p, testHosts, testNow, 0)
	if err != nil {
		t.Fatalf("a fresh key pair is unusable: %v", err)
	}
	if err := c.leaf.VerifyHostname("elsewhere.example"); err == nil {
		t.Error("certificate valid for a host it was not issued for")
	}
	if strings.Contains(string(p.CABundle)+string(p.CertPEM), "PRIVATE KEY") {
		t.Error("the CA key was written")
	}
	if _, err := generateKeyPair(nil, time.Hour, testNow, nil); err == nil {
		t.Error("no hosts: want an error")
	}
}

// TestCertRotatorReplacesUnusable: whatever is wrong with the Secret's
// certificate, the rotator writes a usable one back and serves it; a usable
// one is kept.
func TestCertRotatorReplacesUnusable(t *testing.T) {
	valid := mustKeyPair(t, testHosts, testValidity, testNow, nil)
	other := mustKeyPair(t, testHosts, testValidity, testNow, nil)
	cases := map[string]struct {
		secret *keyPair // nil: no Secret
		// keep: the Secret is fine and stays as it is.
		keep bool
		// keepCA: the old CA is still valid and stays in the bundle.
		keepCA bool
	}{
		"missing":       {},
		"usable":        {secret: valid, keep: true},
		"expired":       {secret: mustKeyPair(t, testHosts, testValidity, testNow.Add(-2*testValidity), nil)},
		"expiring soon": {secret: mustKeyPair(t, testHosts, testValidity, testNow.Add(-testValidity*3/4), nil), keepCA: true},
		"wrong SANs":    {secret: mustKeyPair(t, []string{"gantry-webhook.elsewhere.svc"}, testValidity, testNow, nil), keepCA: true},
		"one SAN short": {secret: mustKeyPair(t, testHosts[:1], testValidity, testNow, nil), keepCA: true},
		"not yet valid": {secret: mustKeyPair(t, testHosts, testValidity, testNow.Add(2*time.Hour), nil), keepCA: true},
		"foreign CA":    {secret: &keyPair{CertPEM: valid.CertPEM, KeyPEM: valid.KeyPEM, CABundle: other.CABundle}, keepCA: true},
		"key mismatch":  {secret: &keyPair{CertPEM: valid.CertPEM, KeyPEM: other.KeyPEM, CABundle: valid.CABundle}, keepCA: true},
		"garbage":       {secret: &keyPair{CertPEM: []byte("garbage"), KeyPEM: []byte("garbage"), CABundle: []byte("garbage")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.secret != nil {
				if _, err := client.CoreV1().Secrets(testNamespace).Create(context.Background(), secretWith(tc.secret), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			r := newRotator(client)
			if err := r.Reconcile(context.Background()); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			s, err := client.CoreV1().Secrets(testNamespace).Get(context.Background(), testSecret, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := secretKeyPair(s)
			if _, err := parseKeyPair(got, testHosts, testNow, testValidity/3); err != nil {
				t.Errorf("the Secret's certificate is unusable after Reconcile: %v", err)
			}
			if tc.secret != nil {
				if changed := !bytes.Equal(got.CertPEM, tc.secret.CertPEM); changed == tc.keep {
					t.Errorf("certificate changed = %v, want %v", changed, !tc.keep)
				}
			}
			served, err := r.GetCertificate(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(served.Certificate[0], firstCertificateDER(t, got.CertPEM)) {
				t.Error("the rotator does not serve the Secret's certificate")
			}
			if tc.secret != nil && !tc.keep {
				oldCA := firstCertificate(tc.secret.CABundle)
				kept := oldCA != nil && bytes.Contains(got.CABundle, pemOf(oldCA))
				if kept != tc.keepCA {
					t.Errorf("old CA kept in the bundle = %v, want %v", kept, tc.keepCA)
				}
				if n := len(parseCertificates(got.CABundle, 10)); n > maxBundleCAs {
					t.Errorf("bundle has %d CAs, want at most %d", n, maxBundleCAs)
				}
			}
		})
	}
}

// TestCertRotatorRotationKeepsBundleBounded: rotating again and again never
// grows the CA bundle beyond the current and the previous CA.
func TestCertRotatorRotationKeepsBundleBounded(t *testing.T) {
	client := fake.NewClientset()
	r := newRotator(client)
	now := testNow
	r.Now = func() time.Time { return now }
	var previous []byte
	for range 4 {
		if err := r.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		bundle, _ := r.caBundle()
		cas := parseCertificates(bundle, 10)
		if len(cas) > maxBundleCAs {
			t.Fatalf("bundle has %d CAs, want at most %d", len(cas), maxBundleCAs)
		}
		if previous != nil && (len(cas) != 2 || !bytes.Equal(cas[1].Raw, firstCertificate(previous).Raw)) {
			t.Fatal("after a rotation the bundle is not the new CA followed by the previous one")
		}
		previous = bundle
		now = now.Add(testValidity * 3 / 4) // within the renewal window
	}
}

// TestCertRotatorRaceOneCA: two replicas that both found no Secret both
// create one; one wins, and both serve its certificate. (The fake answers
// the first two reads "not found", as a real API server would to two
// replicas reading at once before either wrote.)
func TestCertRotatorRaceOneCA(t *testing.T) {
	client := fake.NewClientset()
	gets, creates := 0, 0
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets <= 2 {
			return true, nil, apierrors.NewNotFound(v1.Resource("secrets"), testSecret)
		}
		return false, nil, nil
	})
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates++
		return false, nil, nil
	})
	a, b := newRotator(client), newRotator(client)
	ctx := context.Background()
	if err := a.Reconcile(ctx); err != nil {
		t.Fatalf("first replica: %v", err)
	}
	if err := b.Reconcile(ctx); err != nil {
		t.Fatalf("second replica: %v", err)
	}
	if creates != 2 {
		t.Fatalf("%d creates, want 2 (the race did not happen)", creates)
	}
	s, err := client.CoreV1().Secrets(testNamespace).Get(context.Background(), testSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []*CertRotator{a, b} {
		bundle, err := r.caBundle()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bundle, s.Data[CAFile]) {
			t.Errorf("replica %d serves a CA bundle other than the Secret's", i)
		}
		cert, _ := r.GetCertificate(nil)
		if !bytes.Equal(cert.Certificate[0], firstCertificateDER(t, s.Data[CertFile])) {
			t.Errorf("replica %d serves a certificate other than the Secret's", i)
		}
	}
}

// TestCertRotatorLosesUpdateRace: a replica that replaces an expired
// certificate after another replica already did reads and serves the
// winner's instead of overwriting it.
func TestCertRotatorLosesUpdateRace(t *testing.T) {
	expired := mustKeyPair(t, testHosts, testValidity, testNow.Add(-2*testValidity), nil)
	client := fake.NewClientset(secretWith(expired))
	var winner *v1.Secret
	client.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if winner != nil {
			return false, nil, nil
		}
		// Another replica replaces the certificate between this replica's
		// read and its update.
		winner = secretWith(mustKeyPair(t, testHosts, testValidity, testNow, nil))
		winner.ResourceVersion = "other-replica"
		if err := client.Tracker().Update(v1.SchemeGroupVersion.WithResource("secrets"), winner, testNamespace); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrorsConflict()
	})
	r := newRotator(client)
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, _ := client.CoreV1().Secrets(testNamespace).Get(context.Background(), testSecret, metav1.GetOptions{})
	if !bytes.Equal(s.Data[CertFile], winner.Data[CertFile]) {
		t.Error("the losing replica overwrote the winner's certificate")
	}
	cert, _ := r.GetCertificate(nil)
	if !bytes.Equal(cert.Certificate[0], firstCertificateDER(t, winner.Data[CertFile])) {
		t.Error("the losing replica does not serve the winner's certificate")
	}
}

func testConfigs(bundle []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "gantry-webhook"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mutate.gantry.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: bundle}}}}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "gantry-webhook"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "validate-policy.gantry.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: bundle}},
			{Name: "validate-pods.gantry.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: bundle}},
		}}
	return m, v
}

// TestCAInjectorRestoresWipedBundle: a bundle removed or replaced in any
// webhook of either configuration is written back.
func TestCAInjectorRestoresWipedBundle(t *testing.T) {
	ctx := context.Background()
	pair := mustKeyPair(t, testHosts, testValidity, testNow, nil)
	m, v := testConfigs(nil)
	client := fake.NewClientset(m, v)
	i := &CAInjector{Client: client, Mutating: "gantry-webhook", Validating: "gantry-webhook", Inject: true,
		Bundle: func() ([]byte, error) { return pair.CABundle, nil }}
	check := func(when string) {
		t.Helper()
		m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gantry-webhook", metav1.GetOptions{})
		v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "gantry-webhook", metav1.GetOptions{})
		bundles := [][]byte{m.Webhooks[0].ClientConfig.CABundle}
		for _, w := range v.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
		for n, b := range bundles {
			if !bytes.Equal(b, pair.CABundle) {
				t.Errorf("%s: bundle %d is not the CA", when, n)
			}
		}
	}
	if err := i.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the first injection")

	// Wipe one, replace another, as a GitOps re-apply or a human would.
	wipedM, wipedV := testConfigs(nil)
	wipedV.Webhooks[1].ClientConfig.CABundle = []byte("someone else's CA")
	for _, obj := range []runtime.Object{wipedM, wipedV} {
		gvr := admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations")
		if _, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
			gvr = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations")
		}
		if err := client.Tracker().Update(gvr, obj, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := i.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the wipe")
	if i.Err() != nil {
		t.Errorf("Err() = %v after a successful reconcile", i.Err())
	}
}

// TestCAInjectorSurfacesErrors: a failed injection is kept for readiness.
func TestCAInjectorSurfacesErrors(t *testing.T) {
	client := fake.NewClientset() // no configurations
	i := &CAInjector{Client: client, Mutating: "gantry-webhook", Inject: true,
		Bundle: func() ([]byte, error) { return []byte("ca"), nil }}
	if err := i.Reconcile(context.Background()); err == nil {
		t.Fatal("Reconcile without the configuration: want an error")
	}
	if err := i.Err(); err == nil || !strings.Contains(err.Error(), "MutatingWebhookConfiguration gantry-webhook") {
		t.Errorf("Err() = %v, want the failed injection", err)
	}
}

// TestCAInjectorTrusts: readiness needs every webhook of both
// configurations to verify the served certificate.
func TestCAInjectorTrusts(t *testing.T) {
	pair := mustKeyPair(t, testHosts, testValidity, testNow, nil)
	other := mustKeyPair(t, testHosts, testValidity, testNow, nil)
	served, err := parseKeyPair(pair, testHosts, testNow, 0)
	if err != nil {
		t.Fatal(err)
	}
	rotated := mustKeyPair(t, testHosts, testValidity, testNow, pair.CABundle) // new CA + this one
	cases := map[string]struct {
		mutating, validating, validating2 []byte
		missing                           bool
		wantErr                           string
	}{
		"all match":                {mutating: pair.CABundle, validating: pair.CABundle, validating2: pair.CABundle},
		"previous CA in a bundle":  {mutating: rotated.CABundle, validating: rotated.CABundle, validating2: rotated.CABundle},
		"one wiped":                {mutating: pair.CABundle, validating: pair.CABundle, wantErr: "validate-pods.gantry.dev"},
		"another replica's CA":     {mutating: other.CABundle, validating: pair.CABundle, validating2: pair.CABundle, wantErr: "mutate.gantry.dev"},
		"configurations not there": {missing: true, wantErr: "not found"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, v := testConfigs(nil)
			m.Webhooks[0].ClientConfig.CABundle = tc.mutating
			v.Webhooks[0].ClientConfig.CABundle, v.Webhooks[1].ClientConfig.CABundle = tc.validating, tc.validating2
			i := &CAInjector{Mutating: "gantry-webhook", Validating: "gantry-webhook", stores: map[string]cache.Store{
				kindMutating: cache.NewStore(cache.MetaNamespaceKeyFunc), kindValidating: cache.NewStore(cache.MetaNamespaceKeyFunc)}}
			if !tc.missing {
				_ = i.stores[kindMutating].Add(m)
				_ = i.stores[kindValidating].Add(v)
			}
			err := i.Trusts(served.leaf, testNow)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Trusts: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Trusts = %v, want an error naming %q", err, tc.wantErr)
			}
		})
	}
}

func pemOf(c *x509.Certificate) []byte {
	p, _ := generatePEM(c)
	return p
}

func firstCertificateDER(t *testing.T, pemData []byte) []byte {
	t.Helper()
	c := firstCertificate(pemData)
	if c == nil {
		t.Fatal("no certificate")
	}
	return c.Raw
}

func generatePEM(c *x509.Certificate) ([]byte, error) {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), nil
}

func apierrorsConflict() error {
	return apierrors.NewConflict(v1.Resource("secrets"), testSecret, errors.New("the object has been modified"))
}

// TestCAInjectorRunRestoresWipedBundle: a running injector notices a wiped
// bundle through its watch (no Reconcile call, no timer: the interval is an
// hour) and writes it back, and readiness follows.
func TestCAInjectorRunRestoresWipedBundle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pair := mustKeyPair(t, testHosts, testValidity, time.Now(), nil)
	served, err := parseKeyPair(pair, testHosts, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	m, v := testConfigs(nil)
	client := fake.NewClientset(m, v)
	i := &CAInjector{Client: client, Mutating: "gantry-webhook", Validating: "gantry-webhook", Inject: true,
		Bundle: func() ([]byte, error) { return pair.CABundle, nil }}
	go i.Run(ctx, time.Hour)
	trusted := func(ctx context.Context) (bool, error) { return i.Trusts(served.leaf, time.Now()) == nil, nil }
	if err := util.Poll(ctx, util.Timeout, "the bundle injected and seen", trusted); err != nil {
		t.Fatal(err)
	}
	wiped, _ := testConfigs(nil)
	if err := client.Tracker().Update(admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations"), wiped, ""); err != nil {
		t.Fatal(err)
	}
	// The tracker holds the wiped bundle now: a read shows the injector's
	// write only once it happened.
	restored := func(ctx context.Context) (bool, error) {
		got, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gantry-webhook", metav1.GetOptions{})
		return err == nil && bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, pair.CABundle), err
	}
	if err := util.Poll(ctx, util.Timeout, "the wiped bundle written back", restored); err != nil {
		t.Fatal(err)
	}
	if err := util.Poll(ctx, util.Timeout, "readiness after the restore", trusted); err != nil {
		t.Fatal(err)
	}
}
