package reservation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	gantryconfig "github.com/gantry-dev/gantry/scheduler/apis/config"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "Reservation"

const stateKey fwk.StateKey = Name + "/state"

// Plugin schedules Reservations like pods and lets their owners, and only
// them, use what they hold. One instance runs per profile; they share the
// process's store.
type Plugin struct {
	handle frameworkext.ExtendedHandle
	store  *store
	shared *shared
}

var (
	_ fwk.PreFilterPlugin             = &Plugin{}
	_ fwk.PreScorePlugin              = &Plugin{}
	_ fwk.ScorePlugin                 = &Plugin{}
	_ fwk.ReservePlugin               = &Plugin{}
	_ fwk.BindPlugin                  = &Plugin{}
	_ fwk.EnqueueExtensions           = &Plugin{}
	_ fwk.SignPlugin                  = &Plugin{}
	_ frameworkext.FilterTransformer  = &Plugin{}
	_ frameworkext.ScoreTransformer   = &Plugin{}
	_ frameworkext.NodeHinter         = &Plugin{}
	_ frameworkext.SchedulerAttacher  = &Plugin{}
	_ frameworkext.APIServiceProvider = &Plugin{}
	_ frameworkext.ControllerProvider = &Plugin{}
)

// shared is what every instance of the plugin in a process shares.
type shared struct {
	once  sync.Once
	store *store
	// args are the first instance's, and argsProfile its profile: one
	// store and one status controller serve every profile, so every other
	// instance must have the same args (sameArgs).
	args        *gantryconfig.ReservationArgs
	argsProfile string
	attached    *scheduler.Scheduler
	attachMu    sync.Mutex
	// preempting: scheduler names whose profile's PostFilter is run only by
	// plugins that know reserve pods; there a pending reservation may preempt.
	preempting atomic.Pointer[sets.Set[string]]
}

// sharedKey finds the shared state of the plugin's instances in a scheduler.
var sharedKey = frameworkext.NewSharedKey[*shared](Name)

// reservePodSafePostFilters are the PostFilter plugins harmless to reserve
// pods. A pending reservation reaches PostFilter only in profiles that run
// reservepod.Preemptor, the plugin that knows reserve pods, and no other
// PostFilter plugin but these (DynamicResources declines pods without
// claims); upstream's DefaultPreemption, for one, would treat it as a
// missing pod.
var reservePodSafePostFilters = sets.New(reservepod.Preemptor, names.DynamicResources)

// New builds the plugin; h must be an ExtendedHandle (Gantry's scheduler
// wraps every Gantry plugin factory so that it is).
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	eh, ok := h.(frameworkext.ExtendedHandle)
	if !ok {
		return nil, fmt.Errorf("%s needs Gantry's extended handle: register it through frameworkext", Name)
	}
	registerMetrics()
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	sh := sharedKey.Get(eh.Extender(), func() *shared { return &shared{} })
	var setupErr error
	sh.once.Do(func() {
		sh.args, sh.argsProfile = args, h.ProfileName()
		sh.store = newStore(klog.FromContext(ctx).WithName(Name))
		reservepod.Provide(eh.Extender(), sh.store)
		setupErr = sh.watch(eh)
	})
	if setupErr != nil {
		return nil, setupErr
	}
	if err := sh.sameArgs(h.ProfileName(), args); err != nil {
		return nil, err
	}
	return &Plugin{handle: eh, store: sh.store, shared: sh}, nil
}

// sameArgs fails when profile gives the plugin other args than the first
// profile did: they could not both apply, and the first would silently win.
func (sh *shared) sameArgs(profile string, args *gantryconfig.ReservationArgs) error {
	first, this := *sh.args, *args
	first.TypeMeta, this.TypeMeta = metav1.TypeMeta{}, metav1.TypeMeta{}
	if apiequality.Semantic.DeepEqual(first, this) {
		return nil
	}
	show := func(a gantryconfig.ReservationArgs) string {
		b, _ := json.Marshal(a)
		return string(b)
	}
	return fmt.Errorf("profiles %q and %q give %s different args, %s and %s: every profile that runs the plugin needs the same pluginConfig, for one store serves them all",
		sh.argsProfile, profile, Name, show(first), show(this))
}

// watch feeds the store from the reservation and pod informers.
func (sh *shared) watch(h frameworkext.ExtendedHandle) error {
	s := sh.store
	rinf := h.GantryInformerFactory().Scheduling().V1alpha1().Reservations().Informer()
	if _, err := rinf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.upsert(obj.(*schedv1alpha1.Reservation)) },
		UpdateFunc: func(_, obj any) { s.upsert(obj.(*schedv1alpha1.Reservation)) },
		DeleteFunc: func(obj any) {
			if r := asReservation(obj); r != nil {
				s.remove(r)
			}
		},
	}); err != nil {
		return err
	}
	pinf := h.SharedInformerFactory().Core().V1().Pods().Informer()
	_, err := pinf.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			p := asPod(obj)
			return p != nil && p.Annotations[schedv1alpha1.AnnotationAllocated] != ""
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.observePod(obj.(*v1.Pod), false) },
			UpdateFunc: func(_, obj any) { s.observePod(obj.(*v1.Pod), false) },
			DeleteFunc: func(obj any) {
				if p := asPod(obj); p != nil {
					s.observePod(p, true)
				}
			},
		},
	})
	return err
}

func asReservation(obj any) *schedv1alpha1.Reservation {
	switch t := obj.(type) {
	case *schedv1alpha1.Reservation:
		return t
	case cache.DeletedFinalStateUnknown:
		r, _ := t.Obj.(*schedv1alpha1.Reservation)
		return r
	}
	return nil
}

func asPod(obj any) *v1.Pod {
	switch t := obj.(type) {
	case *v1.Pod:
		return t
	case cache.DeletedFinalStateUnknown:
		p, _ := t.Obj.(*v1.Pod)
		return p
	}
	return nil
}

// Name returns the plugin's name.
func (pl *Plugin) Name() string { return Name }

// AttachScheduler connects the shared store to the scheduler's cache and
// queue, and takes over failure handling of reserve pods. The profiles given
// pending reservations are those whose Bind list runs this plugin before
// DefaultBinder; a profile that enables the plugin otherwise is an error.
func (pl *Plugin) AttachScheduler(sched *scheduler.Scheduler) error {
	sh := pl.shared
	sh.attachMu.Lock()
	defer sh.attachMu.Unlock()
	if sh.attached == sched {
		return nil
	}
	profiles, preempting := sets.New[string](), sets.New[string]()
	for name, f := range sched.Profiles {
		plugins := f.ListPlugins()
		if plugins == nil || !enabled(plugins.Reserve.Enabled) {
			continue
		}
		if !bindsFirst(plugins.Bind.Enabled) {
			return fmt.Errorf("profile %q enables %s but does not run it first in bind (before DefaultBinder): reservations would be bound as pods", name, Name)
		}
		profiles.Insert(name)
		if preemptsReservePods(plugins.PostFilter.Enabled) {
			preempting.Insert(name)
		}
	}
	sh.attached = sched
	sh.preempting.Store(&preempting)
	orig := sched.FailureHandler
	sched.FailureHandler = func(ctx context.Context, f framework.Framework, podInfo *framework.QueuedPodInfo, status *fwk.Status, nominating *fwk.NominatingInfo, start time.Time) {
		if !reservepod.Is(podInfo.Pod) {
			orig(ctx, f, podInfo, status, nominating, start)
			return
		}
		sh.handleFailure(ctx, sched, podInfo, status, nominating)
	}
	sh.store.attach(sched.Cache, sched.SchedulingQueue, profiles)
	return nil
}

// preemptsReservePods reports whether a PostFilter plugin list preempts for
// reserve pods and nothing in it mistakes them for pods.
func preemptsReservePods(ps []config.Plugin) bool {
	found := false
	for _, p := range ps {
		if !reservePodSafePostFilters.Has(p.Name) {
			return false
		}
		found = found || p.Name == reservepod.Preemptor
	}
	return found
}

// mayPreempt reports whether a pending reservation placed by the profile
// schedulerName may go through PostFilter.
func (sh *shared) mayPreempt(schedulerName string) bool {
	if sh == nil {
		return false
	}
	p := sh.preempting.Load()
	return p != nil && p.Has(schedulerName)
}

func enabled(ps []config.Plugin) bool {
	for _, p := range ps {
		if p.Name == Name {
			return true
		}
	}
	return false
}

// bindsFirst: the plugin binds reservations, so it must run before any
// binder of pods.
func bindsFirst(ps []config.Plugin) bool {
	return len(ps) > 0 && ps[0].Name == Name
}

// failureMessage is why a reservation could not be placed. A reservation
// bound for one node (a booking) is told by that node's own filter
// verdict, "node n1: Insufficient cpu (NodeResourcesFit)", rather than by
// the count over nodes that were never its to take; anything else by the
// scheduler's message.
func failureMessage(node string, status *fwk.Status, fitErr *framework.FitError) string {
	if node == "" || fitErr == nil || fitErr.Diagnosis.NodeToStatus == nil {
		return status.Message()
	}
	st := fitErr.Diagnosis.NodeToStatus.Get(node)
	if st == nil || st.IsSuccess() || len(st.Reasons()) == 0 {
		return status.Message()
	}
	msg := "node " + node + ": " + strings.Join(st.Reasons(), ", ")
	if st.Plugin() != "" {
		msg += " (" + st.Plugin() + ")"
	}
	return msg
}

// handleFailure is the scheduler's failure handler for reserve pods: a
// pending reservation goes back to the queue, and the reason is recorded for
// the status controller. No Pod API object is involved.
func (sh *shared) handleFailure(ctx context.Context, sched *scheduler.Scheduler, podInfo *framework.QueuedPodInfo, status *fwk.Status, nominating *fwk.NominatingInfo) {
	logger := klog.FromContext(ctx)
	// As upstream's handler: the caller's pod info is not edited (a pod
	// group's scheduling keeps using its members' infos).
	podInfo = podInfo.DeepCopy()
	q := sched.SchedulingQueue
	uid := podInfo.Pod.UID
	var fitErr *framework.FitError
	if !errors.As(status.AsError(), &fitErr) {
		fitErr = nil
	}
	pod, ok := sh.store.failed(uid, failureMessage(podInfo.Pod.Spec.NodeName, status, fitErr))
	if !ok {
		logger.V(2).Info("Reservation is gone or no longer pending; not requeued", "reservation", podInfo.Pod.Name)
		q.Done(uid)
		return
	}
	logger.V(2).Info("Unable to schedule reservation; waiting", "reservation", podInfo.Pod.Name, "reason", status.Message())
	if fitErr != nil {
		podInfo.UnschedulablePlugins = fitErr.Diagnosis.UnschedulablePlugins
		podInfo.PendingPlugins = fitErr.Diagnosis.PendingPlugins
	}
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		logger.Error(err, "Rebuilding reservation pod info", "reservation", pod.Name)
		q.Done(uid)
		return
	}
	podInfo.PodInfo = pi
	// A preempting reservation is nominated to its node in the store (there
	// is no status to write): pods scheduled meanwhile leave it the room its
	// victims free.
	if nominating.Mode() == fwk.ModeOverride {
		sh.store.nominate(uid, nominating.NominatedNodeName)
	}
	if err := q.AddUnschedulablePodIfNotPresent(logger, podInfo, q.SchedulingCycle()); err != nil {
		logger.Error(err, "Requeueing reservation", "reservation", pod.Name)
	}
}
