package metadatapolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	"github.com/gantry-dev/gantry/admission/metrics"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// PluginName is the plugin's name for --enable-admission-plugins.
const PluginName = "MetadataPolicy"

// AuditAnnotationPrefix prefixes the plugin's audit annotations.
const AuditAnnotationPrefix = "metadatapolicy.gantry.dev/"

// Plugin applies MetadataPolicies in kube-apiserver, and validates the
// policies themselves as they are written.
type Plugin struct {
	*admission.Handler
	client     kubernetes.Interface
	dynamic    dynamic.Interface
	namespaces corev1listers.NamespaceLister
	drained    <-chan struct{}
	source     *Source
	reviewer   *Reviewer
}

var (
	_ admission.MutationInterface                  = &Plugin{}
	_ admission.ValidationInterface                = &Plugin{}
	_ initializer.WantsExternalKubeClientSet       = &Plugin{}
	_ initializer.WantsExternalKubeInformerFactory = &Plugin{}
	_ initializer.WantsDynamicClient               = &Plugin{}
	_ initializer.WantsDrainedNotification         = &Plugin{}
)

// New returns the plugin; the API server's initializers complete it.
func New(io.Reader) (admission.Interface, error) {
	metrics.Register()
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}, nil
}

// SetExternalKubeClientSet implements initializer.WantsExternalKubeClientSet.
func (p *Plugin) SetExternalKubeClientSet(c kubernetes.Interface) { p.client = c }

// SetExternalKubeInformerFactory implements initializer.WantsExternalKubeInformerFactory.
func (p *Plugin) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	p.namespaces = f.Core().V1().Namespaces().Lister()
}

// SetDynamicClient implements initializer.WantsDynamicClient.
func (p *Plugin) SetDynamicClient(d dynamic.Interface) { p.dynamic = d }

// SetDrainedNotification implements initializer.WantsDrainedNotification.
func (p *Plugin) SetDrainedNotification(ch <-chan struct{}) { p.drained = ch }

// ValidateInitialization checks the plugin got what it needs and starts
// watching policies. Until they are known the plugin is not ready, and
// requests wait (bounded) rather than being admitted unchecked.
func (p *Plugin) ValidateInitialization() error {
	switch {
	case p.client == nil:
		return errors.New("MetadataPolicy: missing client")
	case p.dynamic == nil:
		return errors.New("MetadataPolicy: missing dynamic client")
	case p.namespaces == nil:
		return errors.New("MetadataPolicy: missing namespace lister")
	case p.drained == nil:
		return errors.New("MetadataPolicy: missing drained notification")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-p.drained
		cancel()
	}()
	p.source = NewSource(p.dynamic, p.client.Discovery())
	p.SetReadyFunc(p.source.Ready)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.client.CoreV1().Events("")})
	namespaces := NamespaceLabelReader{Lister: p.namespaces, Client: p.client}
	p.reviewer = &Reviewer{
		Source:          p.source,
		NamespaceLabels: namespaces.Labels,
		Recorder:        broadcaster.NewRecorder(nil, v1.EventSource{Component: "metadatapolicy-admission"}),
		Deployment:      metrics.InProcess,
	}
	logCtx := klog.NewContext(ctx, klog.Background().WithName(PluginName))
	go p.source.Run(logCtx)
	go p.source.RunStatus(logCtx, namespaces.Cached)
	return nil
}

// Admit applies the policies that select the object. An update through the
// status subresource is reviewed as an update of the object when it changes
// labels or annotations (pods/status keeps them); other subresources are
// checked in Validate, against the object their strategy stores.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if isPolicyResource(a) || a.GetSubresource() != "" && a.GetSubresource() != "status" {
		return nil
	}
	obj, review, err := subject(a)
	if err != nil || !review {
		return err
	}
	start := time.Now()
	defer metrics.Observe(PluginName, metrics.InProcess, start)
	if !p.WaitForReady() {
		metrics.Decisions.WithLabelValues(metrics.ResultError, metrics.InProcess).Inc()
		return admission.NewForbidden(a, ErrNotReady)
	}
	op := policyv1alpha1.Operation(a.GetOperation())
	reviewer := p.reviewer
	if a.IsDryRun() {
		reviewer = reviewer.WithoutEvents()
	}
	res, err := reviewer.Review(ctx, obj, Describe(a.GetKind().Kind, a.GetNamespace(), a.GetName(), op))
	if err != nil {
		return admission.NewForbidden(a, err)
	}
	if res == nil {
		return nil
	}
	for k, v := range res.AuditAnnotations {
		_ = a.AddAnnotation(AuditAnnotationPrefix+k, v)
	}
	if res.Rejection != "" {
		return admission.NewForbidden(a, errors.New(res.Rejection))
	}
	if !res.Changed() {
		return nil
	}
	m, _ := meta.Accessor(a.GetObject())
	m.SetLabels(Merge(m.GetLabels(), res.Labels))
	m.SetAnnotations(Merge(m.GetAnnotations(), res.Annotations))
	if res.SchedulerName != "" {
		pod, ok := a.GetObject().(*api.Pod)
		if !ok {
			return apierrors.NewBadRequest(fmt.Sprintf("MetadataPolicy: cannot set the scheduler of a %T", a.GetObject()))
		}
		pod.Spec.SchedulerName = res.SchedulerName
	}
	return nil
}

// subject is what the engine sees of a request, and whether policies must
// review it at all: not an object without a namespace (but a Namespace, as
// itself, at CREATE and UPDATE alike), not a subresource update that leaves
// labels and annotations unchanged (kubelet status updates stay cheap).
func subject(a admission.Attributes) (*engine.Object, bool, error) {
	gr := a.GetResource().GroupResource()
	ns := a.GetNamespace()
	isNamespace := gr == api.Resource("namespaces") && a.GetSubresource() == ""
	if isNamespace {
		ns = a.GetName()
	}
	if ns == "" {
		return nil, false, nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		if a.GetSubresource() != "" {
			return nil, false, nil // e.g. a Binding or an Eviction: not the object itself
		}
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("MetadataPolicy: object has no metadata: %v", err))
	}
	if a.GetSubresource() != "" {
		// Only a subresource whose object is the object itself (status,
		// ephemeralcontainers, resize; not a Binding, an Eviction or a Scale)
		// can change its labels or annotations.
		old, err := meta.Accessor(a.GetOldObject())
		if err != nil || reflect.TypeOf(a.GetOldObject()) != reflect.TypeOf(a.GetObject()) || a.GetKind().Kind == "Scale" {
			return nil, false, nil
		}
		if maps.Equal(old.GetLabels(), obj.GetLabels()) && maps.Equal(old.GetAnnotations(), obj.GetAnnotations()) {
			return nil, false, nil
		}
	}
	op := policyv1alpha1.Operation(a.GetOperation())
	if a.GetSubresource() != "" {
		op = policyv1alpha1.Update // as a change of the object
	}
	out := &engine.Object{
		Operation:   op,
		Resource:    policyv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource},
		Namespace:   ns,
		Labels:      obj.GetLabels(),
		Annotations: obj.GetAnnotations(),
		Pod:         gr == api.Resource("pods"),
	}
	if isNamespace {
		// A Namespace is selected by its own labels, as they will be: at
		// CREATE it does not exist yet.
		out.NamespaceLabels = obj.GetLabels()
		if out.NamespaceLabels == nil {
			out.NamespaceLabels = map[string]string{}
		}
	}
	return out, true, nil
}

// Validate rejects policies that do not compile, naming the fields; and
// re-checks every other request against the enforced reject rules, on the
// object as stored after all mutating admission (later mutating webhooks
// and admission policies included) and after a subresource's strategy: a
// rejection holds whatever ran after Admit.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !isPolicyResource(a) {
		return p.recheck(ctx, a)
	}
	if a.GetSubresource() != "" {
		return nil
	}
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	if _, errs := Compile(u); errs != nil {
		return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), errs)
	}
	return nil
}

func (p *Plugin) recheck(ctx context.Context, a admission.Attributes) error {
	obj, review, err := subject(a)
	if err != nil || !review {
		return err
	}
	if !p.WaitForReady() {
		return admission.NewForbidden(a, ErrNotReady)
	}
	rejection, err := p.reviewer.Recheck(ctx, obj)
	if err != nil {
		return admission.NewForbidden(a, err)
	}
	if rejection != "" {
		return admission.NewForbidden(a, errors.New(rejection))
	}
	return nil
}

func isPolicyResource(a admission.Attributes) bool {
	return a.GetResource().Group == policyv1alpha1.GroupName
}
