package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// CertRotator keeps one self-signed serving certificate for all replicas in
// a Secret, and serves that Secret's current certificate.
//
// Every replica reads the Secret. The first replica that finds it missing
// creates it; a replica that finds it unusable (expired or expiring within
// RenewBefore, not valid for Hosts, not verified by its CA bundle, broken)
// replaces it with an update that carries the resourceVersion it read.
// Creation and optimistic updates let exactly one writer win a race; the
// losers read the winner's certificate. The bundle keeps the previous CA
// (see maxBundleCAs) so that a replica still serving the previous
// certificate stays trusted until it has read the new one.
type CertRotator struct {
	Client          kubernetes.Interface
	Namespace, Name string
	// Hosts are the names and IPs the certificate must be valid for.
	Hosts []string
	// Validity of a new CA and certificate; a certificate is replaced
	// RenewBefore its expiry.
	Validity, RenewBefore time.Duration
	// OnChange, when set, is called after the served certificate changed.
	OnChange func()
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu      sync.RWMutex
	current *servingCert
	lastErr error
}

// errNoCertificate is returned while no certificate was read yet.
var errNoCertificate = errors.New("no serving certificate yet")

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (r *CertRotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.current == nil {
		return nil, errNoCertificate
	}
	return r.current.cert, nil
}

func (r *CertRotator) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// maxSecretAttempts bounds the read-decide-write rounds of one Reconcile;
// each lost race means another replica wrote a certificate, which the next
// round reads.
const maxSecretAttempts = 5

// Reconcile reads the Secret, replaces its certificate when it is missing or
// unusable, and serves the result.
func (r *CertRotator) Reconcile(ctx context.Context) error {
	err := r.reconcile(ctx)
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
	return err
}

// Err is the error of the last Reconcile, nil when it succeeded.
func (r *CertRotator) Err() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.lastErr
}

func (r *CertRotator) reconcile(ctx context.Context) error {
	var lastErr error
	for range maxSecretAttempts {
		done, err := r.reconcileOnce(ctx)
		if done {
			return err
		}
		lastErr = err
	}
	return fmt.Errorf("certificate Secret %s/%s: still racing after %d attempts: %w", r.Namespace, r.Name, maxSecretAttempts, lastErr)
}

// reconcileOnce reports done=false when it lost a race and should re-read.
func (r *CertRotator) reconcileOnce(ctx context.Context) (bool, error) {
	logger := klog.FromContext(ctx)
	secrets := r.Client.CoreV1().Secrets(r.Namespace)
	now := r.now()
	s, err := secrets.Get(ctx, r.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		pair, err := generateKeyPair(r.Hosts, r.Validity, now, nil)
		if err != nil {
			return true, err
		}
		s = &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace}, Type: v1.SecretTypeTLS}
		setSecretData(s, pair)
		created, err := secrets.Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, err // another replica was first: read its certificate
		}
		if err != nil {
			return true, fmt.Errorf("creating certificate Secret %s/%s: %w", r.Namespace, r.Name, err)
		}
		logger.Info("Created the webhook's serving certificate", "secret", klog.KObj(created), "hosts", r.Hosts)
		s = created
	case err != nil:
		return true, fmt.Errorf("reading certificate Secret %s/%s: %w", r.Namespace, r.Name, err)
	}

	pair := secretKeyPair(s)
	cert, err := parseKeyPair(pair, r.Hosts, now, r.RenewBefore)
	if err != nil {
		logger.Info("Replacing the webhook's serving certificate", "secret", klog.KObj(s), "reason", err.Error())
		pair, err = generateKeyPair(r.Hosts, r.Validity, now, pair.CABundle)
		if err != nil {
			return true, err
		}
		s = s.DeepCopy()
		if s.Type != v1.SecretTypeTLS && s.Type != v1.SecretTypeOpaque && s.Type != "" {
			return true, fmt.Errorf("certificate Secret %s/%s has type %s, want %s", r.Namespace, r.Name, s.Type, v1.SecretTypeTLS)
		}
		setSecretData(s, pair)
		updated, err := secrets.Update(ctx, s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, err // another replica replaced it first: read that one
		}
		if err != nil {
			return true, fmt.Errorf("updating certificate Secret %s/%s: %w", r.Namespace, r.Name, err)
		}
		if cert, err = parseKeyPair(secretKeyPair(updated), r.Hosts, now, r.RenewBefore); err != nil {
			return true, fmt.Errorf("certificate Secret %s/%s after the update: %w", r.Namespace, r.Name, err)
		}
	}
	r.serve(ctx, cert)
	return true, nil
}

func (r *CertRotator) serve(ctx context.Context, cert *servingCert) {
	r.mu.Lock()
	changed := r.current == nil || !r.current.leaf.Equal(cert.leaf) || string(r.current.pair.CABundle) != string(cert.pair.CABundle)
	r.current = cert
	r.mu.Unlock()
	if changed {
		klog.FromContext(ctx).Info("Serving the webhook certificate", "secret", klog.KRef(r.Namespace, r.Name),
			"serial", cert.leaf.SerialNumber.Text(16), "notAfter", cert.leaf.NotAfter.UTC().Format(time.RFC3339))
		if r.OnChange != nil {
			r.OnChange()
		}
	}
}

func secretKeyPair(s *v1.Secret) *keyPair {
	return &keyPair{CertPEM: s.Data[CertFile], KeyPEM: s.Data[KeyFile], CABundle: s.Data[CAFile]}
}

func setSecretData(s *v1.Secret, p *keyPair) {
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[CertFile], s.Data[KeyFile], s.Data[CAFile] = p.CertPEM, p.KeyPEM, p.CABundle
}

// Run reconciles when the Secret changes and every interval (expiry comes
// without an event), until ctx ends. Errors are logged and retried with a
// short backoff.
func (r *CertRotator) Run(ctx context.Context, interval time.Duration) {
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	informer := cache.NewSharedIndexInformer(namedListWatch(r.Client, r.Name, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return r.Client.CoreV1().Secrets(r.Namespace).List(ctx, o)
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return r.Client.CoreV1().Secrets(r.Namespace).Watch(ctx, o)
	}), &v1.Secret{}, 0, cache.Indexers{})
	_, _ = informer.AddEventHandler(pokeOnAnyEvent(poke))
	go informer.RunWithContext(ctx)
	runLoop(ctx, "certificate Secret", interval, trigger, r.Reconcile)
}
