package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// CAInjector keeps a CA bundle in every webhook of the named mutating and
// validating webhook configurations: it watches them and writes the bundle
// back whenever something (a GitOps tool re-applying the manifests, a
// human) removes or changes it. With Inject off it only watches, for
// readiness (a certificate managed elsewhere, e.g. by cert-manager and its
// CA injector).
type CAInjector struct {
	Client kubernetes.Interface
	// Mutating and Validating name the configurations ("" skips one).
	Mutating, Validating string
	// Inject writes Bundle(); otherwise the injector only watches.
	Inject bool
	// Bundle is the CA bundle (PEM) to inject.
	Bundle func() ([]byte, error)

	trigger chan struct{}
	mu      sync.Mutex
	lastErr error
	stores  map[string]cache.Store // by kind, when Run has started
}

const (
	kindMutating   = "MutatingWebhookConfiguration"
	kindValidating = "ValidatingWebhookConfiguration"
)

// Poke asks a running injector to reconcile now.
func (i *CAInjector) Poke() {
	i.mu.Lock()
	t := i.trigger
	i.mu.Unlock()
	if t != nil {
		select {
		case t <- struct{}{}:
		default:
		}
	}
}

// Err is the error of the last Reconcile, nil when it succeeded.
func (i *CAInjector) Err() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.lastErr
}

// Reconcile writes the bundle into every webhook of the named configurations
// whose bundle differs, and remembers the outcome for Err.
func (i *CAInjector) Reconcile(ctx context.Context) error {
	err := i.reconcile(ctx)
	i.mu.Lock()
	i.lastErr = err
	i.mu.Unlock()
	return err
}

func (i *CAInjector) reconcile(ctx context.Context) error {
	if !i.Inject {
		return nil
	}
	bundle, err := i.Bundle()
	if err != nil {
		return err
	}
	c := i.Client.AdmissionregistrationV1()
	var errs []error
	if i.Mutating != "" {
		errs = append(errs, i.inject(ctx, kindMutating, i.Mutating, func() (bool, error) {
			cfg, err := c.MutatingWebhookConfigurations().Get(ctx, i.Mutating, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !setCABundles(len(cfg.Webhooks), func(n int) *[]byte { return &cfg.Webhooks[n].ClientConfig.CABundle }, bundle) {
				return false, nil
			}
			_, err = c.MutatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{})
			return true, err
		}))
	}
	if i.Validating != "" {
		errs = append(errs, i.inject(ctx, kindValidating, i.Validating, func() (bool, error) {
			cfg, err := c.ValidatingWebhookConfigurations().Get(ctx, i.Validating, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !setCABundles(len(cfg.Webhooks), func(n int) *[]byte { return &cfg.Webhooks[n].ClientConfig.CABundle }, bundle) {
				return false, nil
			}
			_, err = c.ValidatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{})
			return true, err
		}))
	}
	return errors.Join(errs...)
}

func (i *CAInjector) inject(ctx context.Context, kind, name string, update func() (bool, error)) error {
	var updated bool
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		updated, err = update()
		return err
	})
	if err != nil {
		return fmt.Errorf("injecting the CA bundle into %s %s: %w", kind, name, err)
	}
	if updated {
		klog.FromContext(ctx).Info("Injected the CA bundle", "kind", kind, "name", name)
	}
	return nil
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

// Run watches the configurations and reconciles on every change of them,
// on Poke, and every interval, until ctx ends.
func (i *CAInjector) Run(ctx context.Context, interval time.Duration) {
	trigger := make(chan struct{}, 1)
	i.mu.Lock()
	i.trigger, i.stores = trigger, map[string]cache.Store{}
	i.mu.Unlock()
	c := i.Client.AdmissionregistrationV1()
	start := func(kind, name string, lw cache.ListerWatcher, obj runtime.Object) {
		if name == "" {
			return
		}
		informer := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
		_, _ = informer.AddEventHandler(pokeOnAnyEvent(i.Poke))
		i.mu.Lock()
		i.stores[kind] = informer.GetStore()
		i.mu.Unlock()
		go informer.RunWithContext(ctx)
	}
	start(kindMutating, i.Mutating, namedListWatch(i.Client, i.Mutating, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.MutatingWebhookConfigurations().List(ctx, o)
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return c.MutatingWebhookConfigurations().Watch(ctx, o)
	}), &admissionregistrationv1.MutatingWebhookConfiguration{})
	start(kindValidating, i.Validating, namedListWatch(i.Client, i.Validating, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.ValidatingWebhookConfigurations().List(ctx, o)
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return c.ValidatingWebhookConfigurations().Watch(ctx, o)
	}), &admissionregistrationv1.ValidatingWebhookConfiguration{})
	runLoop(ctx, "CA bundle", interval, trigger, i.Reconcile)
}

// Trusts checks, on the watched configurations, that every webhook's CA
// bundle verifies leaf, and that the last injection succeeded: the API
// server can then call this replica.
func (i *CAInjector) Trusts(leaf *x509.Certificate, now time.Time) error {
	i.mu.Lock()
	stores, lastErr := i.stores, i.lastErr
	i.mu.Unlock()
	if lastErr != nil {
		return lastErr
	}
	if stores == nil {
		return errors.New("not watching the webhook configurations yet")
	}
	check := func(kind, name string, bundles func(obj any) map[string][]byte) error {
		if name == "" {
			return nil
		}
		obj, ok, _ := stores[kind].GetByKey(name)
		if !ok {
			return fmt.Errorf("%s %s not found", kind, name)
		}
		for webhook, bundle := range bundles(obj) {
			if err := verifiedBy(leaf, bundle, now); err != nil {
				return fmt.Errorf("webhook %s of %s %s: %w", webhook, kind, name, err)
			}
		}
		return nil
	}
	return errors.Join(
		check(kindMutating, i.Mutating, func(obj any) map[string][]byte {
			m := map[string][]byte{}
			for _, w := range obj.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks {
				m[w.Name] = w.ClientConfig.CABundle
			}
			return m
		}),
		check(kindValidating, i.Validating, func(obj any) map[string][]byte {
			m := map[string][]byte{}
			for _, w := range obj.(*admissionregistrationv1.ValidatingWebhookConfiguration).Webhooks {
				m[w.Name] = w.ClientConfig.CABundle
			}
			return m
		}),
	)
}

// namedListWatch lists and watches the one object called name through
// client.
func namedListWatch(client kubernetes.Interface, name string, list cache.ListWithContextFunc, watchFunc cache.WatchFuncWithContext) cache.ListerWatcher {
	selector := fields.OneTermEqualSelector(metav1.ObjectNameField, name).String()
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return watchFunc(ctx, o)
		},
	}, client)
}

func pokeOnAnyEvent(poke func()) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
}

// Retry delays of runLoop after an error.
const (
	minRetryDelay = 500 * time.Millisecond
	maxRetryDelay = 30 * time.Second
)

// runLoop calls reconcile at once, then on every trigger and every
// interval, until ctx ends; after an error it retries with a growing delay
// (up to maxRetryDelay).
func runLoop(ctx context.Context, what string, interval time.Duration, trigger <-chan struct{}, reconcile func(context.Context) error) {
	logger := klog.FromContext(ctx)
	retryDelay := minRetryDelay
	for {
		next := interval
		if err := reconcile(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Reconciling; will retry", "what", what, "retryAfter", retryDelay)
			next, retryDelay = min(retryDelay, interval), min(2*retryDelay, maxRetryDelay)
		} else {
			retryDelay = minRetryDelay
		}
		timer := time.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-trigger:
			timer.Stop()
		case <-timer.C:
		}
	}
}
