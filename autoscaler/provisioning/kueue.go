package provisioning

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gantry-dev/gantry/autoscaler/provisioning/priority"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// Kueue evicts an admitted workload (a higher-priority one preempted it,
// its ClusterQueue was stopped, ...) by suspending its Job, and leaves the
// ProvisioningRequest it made for the workload as it is until it gives the
// workload quota again. The room booked for the workload's pods would be
// held until the booking expired, refused to the very workload that
// preempted it. So the provisioner watches Kueue's Workloads, once Kueue's
// API is served, and ends the booking of a Provisioned request whose
// controller is an evicted Workload: BookingExpired, reason
// WorkloadEvicted. Kueue takes a BookingExpired request of a workload it
// has not admitted as a retry: it asks for a new booking when it admits
// the workload again.
//
// Only the request's own controller counts, in the request's namespace and
// with the UID its owner reference names: a tenant who forges an owner
// reference or evicts a Workload ends only its own bookings.

// WorkloadGVK is the Kueue API version the provisioner reads Workloads in.
var WorkloadGVK = schema.GroupVersionKind{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "Workload"}

// newWorkload is an empty Workload to read into.
func newWorkload() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(WorkloadGVK)
	return u
}

// kueueWatch is the Reconciler's side of the Workload watch.
type kueueWatch struct {
	// workloads reads Workloads once they are watched (a client.Reader;
	// unset until then).
	workloads atomic.Value
	once      sync.Once
	// events wake the requests of evicted Workloads.
	events chan event.TypedGenericEvent[*provv1.ProvisioningRequest]
}

func (k *kueueWatch) channel() chan event.TypedGenericEvent[*provv1.ProvisioningRequest] {
	k.once.Do(func() { k.events = make(chan event.TypedGenericEvent[*provv1.ProvisioningRequest], 128) })
	return k.events
}

// reader reads Workloads, nil until they are watched.
func (k *kueueWatch) reader() client.Reader {
	r, _ := k.workloads.Load().(client.Reader)
	return r
}

// SetupWorkloadsWithManager starts watching Kueue's Workloads, in a cache
// of their own that keeps what stripWorkload keeps (a Workload holds its
// pods' templates), with a controller that wakes the requests of evicted
// ones; the same cache reads WorkloadPriorityClasses. Call it once Kueue's Workload API is served (a cache of a
// kind the API server does not know cannot start); the manager may have
// started.
func (r *Reconciler) SetupWorkloadsWithManager(mgr manager.Manager) error {
	workloads, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{newWorkload(): {Transform: stripWorkload}},
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(workloads); err != nil {
		return err
	}
	c, err := controller.New("kueue-workload", mgr, controller.Options{
		Reconciler: reconcile.Func(r.wakeRequestsOfWorkload), MaxConcurrentReconciles: 1})
	if err != nil {
		return err
	}
	evicted := predicate.NewTypedPredicateFuncs(func(u *unstructured.Unstructured) bool { return workloadEvicted(u) != "" })
	if err := c.Watch(source.Kind(workloads, newWorkload(), &handler.TypedEnqueueRequestForObject[*unstructured.Unstructured]{}, evicted)); err != nil {
		return err
	}
	r.kueue.workloads.Store(client.Reader(workloads))
	return nil
}

// wakeRequestsOfWorkload enqueues the requests an evicted Workload
// controls.
func (r *Reconciler) wakeRequestsOfWorkload(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	workloads := r.kueue.reader()
	if workloads == nil {
		return reconcile.Result{}, nil
	}
	wl := newWorkload()
	if err := workloads.Get(ctx, req.NamespacedName, wl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var list provv1.ProvisioningRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(req.Namespace)); err != nil {
		return reconcile.Result{}, err
	}
	for i := range list.Items {
		if controlledByWorkload(&list.Items[i]) == wl.GetUID() {
			select {
			case r.kueue.channel() <- event.TypedGenericEvent[*provv1.ProvisioningRequest]{Object: &list.Items[i]}:
			case <-ctx.Done():
				return reconcile.Result{}, ctx.Err()
			}
		}
	}
	return reconcile.Result{}, nil
}

// controlledByWorkload is the UID of the Kueue Workload that controls pr,
// "" for none.
func controlledByWorkload(pr *provv1.ProvisioningRequest) types.UID {
	for _, o := range pr.OwnerReferences {
		if o.Controller == nil || !*o.Controller || o.Kind != WorkloadGVK.Kind {
			continue
		}
		if gv, err := schema.ParseGroupVersion(o.APIVersion); err == nil && gv.Group == WorkloadGVK.Group {
			return o.UID
		}
	}
	return ""
}

// workloadEvicted is the reason of the Workload's Evicted=True condition,
// "" when it is not evicted.
func workloadEvicted(wl *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Evicted" && m["status"] == "True" {
			reason, _ := m["reason"].(string)
			return fmt.Sprintf("%s (%s)", reason, truncate(fmt.Sprint(m["message"])))
		}
	}
	return ""
}

// evictedWorkload says why the Kueue Workload controlling pr was evicted,
// "" when it was not, or when pr has none or Kueue's API is not watched.
func (r *Reconciler) evictedWorkload(ctx context.Context, pr *provv1.ProvisioningRequest) string {
	wl := r.controllingWorkload(ctx, pr)
	if wl == nil {
		return ""
	}
	if why := workloadEvicted(wl); why != "" {
		return fmt.Sprintf("Kueue evicted workload %s: %s", wl.GetName(), why)
	}
	return ""
}

// controllingWorkload is the Kueue Workload that controls pr, as the
// Workload cache has it: of pr's namespace, with the UID pr's owner
// reference names. Nil for none, or when Kueue's API is not watched.
func (r *Reconciler) controllingWorkload(ctx context.Context, pr *provv1.ProvisioningRequest) *unstructured.Unstructured {
	uid := controlledByWorkload(pr)
	workloads := r.kueue.reader()
	if uid == "" || workloads == nil {
		return nil
	}
	var name string
	for _, o := range pr.OwnerReferences {
		if o.UID == uid {
			name = o.Name
		}
	}
	wl := newWorkload()
	if err := workloads.Get(ctx, types.NamespacedName{Namespace: pr.Namespace, Name: name}, wl); err != nil {
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).V(2).Info("Not reading the request's Workload", "workload", name, "err", err)
		}
		return nil
	}
	if wl.GetUID() != uid {
		return nil
	}
	return wl
}

// stripWorkload keeps of a Workload what the provisioner reads (its
// metadata but managed fields, its priority class and its conditions), as
// the cache's transform: a Workload holds its pods' templates.
func stripWorkload(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := newWorkload()
	if m, ok := u.Object["metadata"].(map[string]any); ok {
		delete(m, "managedFields")
		out.Object["metadata"] = m
	}
	if conds, found, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); found {
		_ = unstructured.SetNestedSlice(out.Object, conds, "status", "conditions")
	}
	if ref, found, _ := unstructured.NestedMap(u.Object, "spec", "priorityClassRef"); found {
		_ = unstructured.SetNestedMap(out.Object, ref, "spec", "priorityClassRef")
	}
	return out, nil
}

// workloadPriorityClassGVK is the kind of Kueue's workload priorities.
var workloadPriorityClassGVK = schema.GroupVersionKind{Group: WorkloadGVK.Group, Version: WorkloadGVK.Version, Kind: "WorkloadPriorityClass"}

// workloadPriority is the value of the WorkloadPriorityClass of the Kueue
// Workload that controls pr, at most priority.HighestUserDefinablePriority,
// and whether there is one: Kueue gives a workload that priority, not its
// pods, and the ProvisioningRequest it makes carries only the pods'
// template. The tenant names the class (a label of its Job), and Kueue lets
// it name any: a workload priority never makes a booking a system one.
// Without a watched Workload of the request's, or a WorkloadPriorityClass
// of that name, the pods' own priority stands.
func (r *Reconciler) workloadPriority(ctx context.Context, pr *provv1.ProvisioningRequest) (int32, bool) {
	wl := r.controllingWorkload(ctx, pr)
	if wl == nil {
		return 0, false
	}
	ref, _, _ := unstructured.NestedStringMap(wl.Object, "spec", "priorityClassRef")
	if ref["group"] != workloadPriorityClassGVK.Group || ref["kind"] != workloadPriorityClassGVK.Kind || ref["name"] == "" {
		return 0, false
	}
	class := &unstructured.Unstructured{}
	class.SetGroupVersionKind(workloadPriorityClassGVK)
	if err := r.kueue.reader().Get(ctx, types.NamespacedName{Name: ref["name"]}, class); err != nil {
		klog.FromContext(ctx).V(2).Info("Not reading the workload's priority class", "class", ref["name"], "err", err)
		return 0, false
	}
	value, found, err := unstructured.NestedInt64(class.Object, "value")
	if !found || err != nil {
		return 0, false
	}
	return int32(min(value, int64(priority.HighestUserDefinablePriority))), true
}
