package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	goruntime "runtime"
	"time"

	"github.com/blang/semver/v4"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	"k8s.io/apiserver/pkg/server/statusz"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/configz"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/prometheus/slis"
	utilversion "k8s.io/component-base/version"
	zpagesfeatures "k8s.io/component-base/zpages/features"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	schedulerserverconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	kubefeatures "k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	conversionv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/metrics/resources"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

const componentName = "kube-scheduler"

// Run runs the scheduler built by upstream's Setup, as upstream's Run does
// (configz, events, health checks, the secure endpoints, informers, leader
// election), plus Gantry's endpoints on the same secure port and Gantry's
// informers and plugin controllers. Plugin controllers run only while this
// instance leads. It returns when ctx ends or leadership is lost.
//
// It follows upstream's Run of k8s.io/kubernetes v1.37.2
// (cmd/kube-scheduler/app/server.go), the one part of Gantry's scheduler
// that restates upstream's start-up rather than calling it: on a Kubernetes
// bump, compare the two and carry over what changed.
func Run(ctx context.Context, cc *schedulerserverconfig.CompletedConfig, sched *scheduler.Scheduler, ext *frameworkext.Extender) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting Gantry kube-scheduler", "version", utilversion.Get())

	if err := registerConfigz(cc); err != nil {
		return err
	}
	cc.EventBroadcaster.StartRecordingToSink(ctx.Done())
	defer cc.EventBroadcaster.Shutdown()

	var healthChecks, readyChecks []healthz.HealthChecker
	if cc.ComponentConfig.LeaderElection.LeaderElect {
		healthChecks = append(healthChecks, cc.LeaderElection.WatchDog)
		readyChecks = append(readyChecks, cc.LeaderElection.WatchDog)
	}
	readyChecks = append(readyChecks, healthz.NewShutdownHealthz(ctx.Done()))

	leading := make(chan struct{})
	isLeader := func() bool {
		select {
		case <-leading:
			return true
		default:
			return false
		}
	}
	synced := make(chan struct{})
	readyChecks = append(readyChecks, healthz.NamedCheck("sched-handler-sync", func(*http.Request) error {
		select {
		case <-synced:
			return nil
		default:
			return fmt.Errorf("handlers are not fully synchronized")
		}
	}))

	if cc.LeaderElection != nil && utilfeature.DefaultFeatureGate.Enabled(kubefeatures.CoordinatedLeaderElection) {
		check, err := runLeaseCandidate(ctx, cc)
		if err != nil {
			return err
		}
		readyChecks = append(readyChecks, check)
	}

	stopServing := func() {}
	if cc.SecureServing != nil {
		endpoints := endpointsHandler(cc, isLeader, healthChecks, readyChecks, ext)
		handler := withServingFilters(endpoints, cc.Authentication.Authenticator, cc.Authorization.Authorizer)
		stop := make(chan struct{})
		stopped, listenerStopped, err := cc.SecureServing.Serve(handler, 5*time.Second, stop)
		if err != nil {
			close(stop)
			return fmt.Errorf("failed to start secure server: %w", err)
		}
		stopServing = func() {
			close(stop)
			<-listenerStopped
			<-stopped
		}
	}

	startInformers := func(ctx context.Context) {
		cc.InformerFactory.Start(ctx.Done())
		if cc.DynInformerFactory != nil {
			cc.DynInformerFactory.Start(ctx.Done())
		}
		ext.StartInformers(ctx)
		cc.InformerFactory.WaitForCacheSync(ctx.Done())
		if cc.DynInformerFactory != nil {
			cc.DynInformerFactory.WaitForCacheSync(ctx.Done())
		}
		waitForGantryInformers(ctx, ext)
		if err := sched.WaitForHandlersSync(ctx); err != nil {
			logger.Error(err, "handlers are not fully synchronized")
		}
		close(synced)
	}
	lead := func(ctx context.Context) {
		close(leading)
		if cc.ComponentConfig.DelayCacheUntilActive {
			startInformers(ctx)
		}
		ext.RunControllers(ctx)
		sched.Run(ctx)
	}
	if !cc.ComponentConfig.DelayCacheUntilActive || cc.LeaderElection == nil {
		startInformers(ctx)
	}

	if cc.LeaderElection == nil {
		lead(ctx)
		stopServing()
		return fmt.Errorf("finished without leader elect")
	}
	if utilfeature.DefaultFeatureGate.Enabled(kubefeatures.CoordinatedLeaderElection) {
		cc.LeaderElection.Coordinated = true
	}
	cc.LeaderElection.Callbacks = leaderelection.LeaderCallbacks{
		OnStartedLeading: lead,
		OnStoppedLeading: func() {
			// Plugin controllers stop with the leading context; the process
			// exits so that no state of a former leader lingers.
			stopServing()
			select {
			case <-ctx.Done():
				logger.Info("Requested to terminate, exiting")
				os.Exit(0)
			default:
				logger.Error(nil, "Leader election lost")
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			}
		},
	}
	elector, err := leaderelection.NewLeaderElector(*cc.LeaderElection)
	if err != nil {
		return fmt.Errorf("couldn't create leader elector: %w", err)
	}
	elector.Run(ctx)
	return fmt.Errorf("lost lease")
}

// waitForGantryInformers waits, at most ext.CRDSyncTimeout(), for the
// informers of Gantry's custom resources. A missing CRD, or resources the
// scheduler may not list, must not stop all scheduling: after the timeout
// it logs which informers are missing and returns, and the scheduler runs
// without them. Until they sync, the features that need them are off (the
// Reservation plugin knows no reservation, so it holds nothing and places
// no owner; its status controller waits). The informers keep retrying in
// the background, and those features start as soon as they sync, when the
// CRD is installed or the permission granted: no restart is needed.
func waitForGantryInformers(ctx context.Context, ext *frameworkext.Extender) {
	logger := klog.FromContext(ctx)
	timeout := ext.CRDSyncTimeout()
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	err := ext.WaitForCacheSync(syncCtx)
	cancel()
	if err == nil || ctx.Err() != nil {
		return
	}
	logger.Error(err, "Gantry's custom resources cannot be listed: scheduling pods without the Gantry features that need them (reservations are ignored) until they can. Is every Gantry CRD installed, and may the scheduler list and watch them?",
		"timeout", timeout)
	go func() {
		if err := ext.WaitForCacheSync(ctx); err == nil {
			logger.Info("Gantry's custom resources are listed now: the Gantry features that need them are on")
		}
	}()
}

func registerConfigz(cc *schedulerserverconfig.CompletedConfig) error {
	external := &configv1.KubeSchedulerConfiguration{}
	if err := conversionv1.Convert_config_KubeSchedulerConfiguration_To_v1_KubeSchedulerConfiguration(&cc.ComponentConfig, external, nil); err != nil {
		return fmt.Errorf("unable to convert configz: %w", err)
	}
	external.SetGroupVersionKind(configv1.SchemeGroupVersion.WithKind("KubeSchedulerConfiguration"))
	cz, err := configz.New("componentconfig")
	if err != nil {
		return fmt.Errorf("unable to register configz: %w", err)
	}
	if err := cz.Set(external); err != nil {
		return fmt.Errorf("unable to set configz: %w", err)
	}
	return nil
}

func runLeaseCandidate(ctx context.Context, cc *schedulerserverconfig.CompletedConfig) (healthz.HealthChecker, error) {
	ev := cc.ComponentGlobalsRegistry.EffectiveVersionFor(basecompatibility.DefaultKubeComponent)
	binary, err := semver.ParseTolerant(ev.BinaryVersion().String())
	if err != nil {
		return nil, err
	}
	emulation, err := semver.ParseTolerant(ev.EmulationVersion().String())
	if err != nil {
		return nil, err
	}
	candidate, waitForSync, err := leaderelection.NewCandidate(cc.Client, metav1.NamespaceSystem,
		cc.LeaderElection.Lock.Identity(), componentName, binary.FinalizeVersion(), emulation.FinalizeVersion(),
		coordinationv1.OldestEmulationVersion)
	if err != nil {
		return nil, err
	}
	go candidate.Run(ctx)
	return healthz.NewInformerSyncHealthz(waitForSync), nil
}

// endpointsHandler serves what upstream kube-scheduler serves on its secure
// port, plus Gantry's /gantry/v1/ services and, with profiling,
// /debug/flags/s.
func endpointsHandler(cc *schedulerserverconfig.CompletedConfig, isLeader func() bool, healthChecks, readyChecks []healthz.HealthChecker, ext *frameworkext.Extender) http.Handler {
	m := mux.NewPathRecorderMux(componentName)
	healthz.InstallHandler(m, healthChecks...)
	healthz.InstallLivezHandler(m)
	healthz.InstallReadyzHandler(m, readyChecks...)
	configz.InstallHandler(m)
	m.Handle("/metrics", legacyregistry.HandlerWithReset())
	podResources := resources.Handler(cc.InformerFactory.Core().V1().Pods().Lister())
	m.HandleFunc("/metrics/resources", func(w http.ResponseWriter, r *http.Request) {
		if isLeader() {
			podResources.ServeHTTP(w, r)
		}
	})
	slis.SLIMetricsWithReset{}.Install(m)
	if cc.ComponentConfig.EnableProfiling {
		routes.Profiling{}.Install(m)
		if cc.ComponentConfig.EnableContentionProfiling {
			goruntime.SetBlockProfileRate(1)
		}
		routes.DebugFlags{}.Install(m, "v", routes.StringFlagPutHandler(logs.GlogSetter))
	}
	installGantryEndpoints(m, cc.ComponentConfig.EnableProfiling, ext, isLeader)
	if utilfeature.DefaultFeatureGate.Enabled(zpagesfeatures.ComponentFlagz) && cc.Flagz != nil {
		flagz.Install(m, componentName, cc.Flagz)
	}
	if utilfeature.DefaultFeatureGate.Enabled(zpagesfeatures.ComponentStatusz) {
		statusz.Install(m, componentName, statusz.NewRegistry(compatibility.DefaultBuildEffectiveVersion(),
			statusz.WithListedPaths(m.ListedPaths())))
	}
	return m
}

// installGantryEndpoints adds Gantry's endpoints to the secure port's mux:
// the REST services under /gantry/v1/, and with profiling the score-debug
// toggle /debug/flags/s. No default role grants either (system:discovery
// covers /api and /apis only): they need the ClusterRoles of
// scheduler/config/rbac.yaml.
func installGantryEndpoints(m *mux.PathRecorderMux, enableProfiling bool, ext *frameworkext.Extender, isLeader func() bool) {
	// The runtime score-debug toggle is served, like upstream's
	// /debug/flags/v, only with profiling enabled (--debug-scores works
	// either way). DebugFlags registers the /debug/flags index with its
	// first flag only.
	if enableProfiling {
		m.UnlistedHandleFunc("/debug/flags/s", routes.StringFlagPutHandler(ext.SetDebugScoresString))
	}
	m.HandlePrefix(frameworkext.ServicesPrefix, ext.ServicesHandler(isLeader))
}

// withServingFilters puts the endpoints behind the scheduler's delegated
// authentication and authorization, as upstream does for all of them. The
// request-info resolver has no API prefixes: every path, /gantry/v1/...
// included, is authorized as a non-resource URL.
func withServingFilters(h http.Handler, authn authenticator.Request, authz authorizer.UnconditionalAuthorizer) http.Handler {
	resolver := &apirequest.RequestInfoFactory{}
	h = genericapifilters.WithAuthorization(h, authz, scheme.Codecs)
	h = genericapifilters.WithAuthentication(h, authn, genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	h = genericapifilters.WithRequestInfo(h, resolver)
	h = genericapifilters.WithCacheControl(h)
	h = genericfilters.WithHTTPLogging(h)
	h = genericfilters.WithPanicRecovery(h, resolver)
	return h
}
