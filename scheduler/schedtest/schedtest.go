// Package schedtest runs Gantry's kube-scheduler in-process against a real
// etcd and kube-apiserver (from _output/bin) for integration tests: upstream's
// Setup with Gantry's plugins, the extension layer attached, Gantry's Run.
// The scheduler can be made to talk to the apiserver through a proxy that
// fails or delays chosen requests, to test what happens when API calls fail.
package schedtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/configz"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	upstream "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	"github.com/gantry-dev/gantry/scheduler/app"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/profiles"
	"github.com/gantry-dev/gantry/test/faultproxy"
	"github.com/gantry-dev/gantry/test/integration/framework"
)

// GantryProfile is Gantry's profile (scheduler/profiles/gantry.yaml), as
// the body of a profile for StartScheduler.
var GantryProfile = profiles.Body(profiles.Gantry())

// Env is a control plane with Gantry's CRDs and clients for it.
type Env struct {
	T      testing.TB
	Dir    string
	Config *rest.Config
	Client kubernetes.Interface
	Gantry gantryclient.Interface
	// Faults sits between the scheduler and kube-apiserver.
	Faults *Faults
}

// Setup starts etcd and kube-apiserver with Gantry's CRDs
// (framework.StartWithCRDs) and a fault proxy in front of them.
func Setup(t testing.TB) *Env {
	t.Helper()
	return newEnv(t, framework.StartWithCRDs(t))
}

// SetupWithArgs is Setup with extra kube-apiserver flags ("--name=value").
func SetupWithArgs(t testing.TB, apiserverArgs ...string) *Env {
	t.Helper()
	return newEnv(t, framework.StartWithCRDs(t, apiserverArgs...))
}

// EnableGangs turns gang scheduling (GenericWorkload) on in this process's
// scheduler for the test, and returns the kube-apiserver flags under which
// it serves PodGroups (a beta API, off by default), for SetupWithArgs.
func EnableGangs(t testing.TB) []string {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	return []string{"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"}
}

// SetupWithoutCRDs is Setup without Gantry's CRDs, for tests of a scheduler
// that must work without them; framework.InstallGantryCRDs(e.Config)
// installs them later.
func SetupWithoutCRDs(t testing.TB) *Env {
	t.Helper()
	return newEnv(t, framework.Start(t))
}

func newEnv(t testing.TB, cp *framework.ControlPlane) *Env {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 200, 400
	gc, err := gantryclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, Dir: cp.Dir(), Config: cfg, Client: cp.Client, Gantry: gc, Faults: newFaults(t, cp.Config)}
}

// CreateNodes creates n Ready, untainted nodes node-0..n-1 with cpu CPUs.
func (e *Env) CreateNodes(n int, cpu string) {
	e.T.Helper()
	ctx := context.Background()
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		// Labelled with its hostname, as the kubelet labels a node.
		node := st.MakeNode().Name(name).Label(v1.LabelHostname, name).Capacity(map[v1.ResourceName]string{
			v1.ResourceCPU: cpu, v1.ResourceMemory: "16Gi", v1.ResourcePods: "110"}).Obj()
		node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
		created, err := e.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			e.T.Fatal(err)
		}
		// Admission taints new nodes not-ready; there is no node controller
		// here to lift it.
		created.Status = node.Status
		if created, err = e.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			e.T.Fatal(err)
		}
		created.Spec.Taints = nil
		if _, err := e.Client.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			e.T.Fatal(err)
		}
	}
}

// Scheduler is Gantry's kube-scheduler running in this process.
type Scheduler struct {
	Sched  *scheduler.Scheduler
	Ext    *frameworkext.Extender
	cancel context.CancelFunc
	done   chan struct{}
}

// StartScheduler runs Gantry's kube-scheduler with one profile
// (default-scheduler) whose plugins section is profile, talking to the
// apiserver through the fault proxy. It stops when the test ends.
func (e *Env) StartScheduler(profile string) *Scheduler {
	e.T.Helper()
	return e.StartSchedulerQPS(profile, 200, 400)
}

// StartSchedulerQPS is StartScheduler with the scheduler's client rate
// limits (clientConnection qps and burst) set.
func (e *Env) StartSchedulerQPS(profile string, qps float32, burst int32) *Scheduler {
	e.T.Helper()
	kubeconfig := filepath.Join(e.Dir, "scheduler.kubeconfig")
	kc := clientcmdapi.NewConfig()
	// No credentials: the proxy authenticates to kube-apiserver as the
	// admin.
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: e.Faults.URL(), InsecureSkipTLSVerify: true}
	kc.AuthInfos["a"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "a"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		e.T.Fatal(err)
	}
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: %q
  qps: %v
  burst: %d
profiles:
- schedulerName: default-scheduler
%s`, kubeconfig, qps, burst, profile)
	configFile := filepath.Join(e.Dir, "scheduler.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		e.T.Fatal(err)
	}
	configz.Delete("componentconfig") // registered again by each Run in this process
	opts := options.NewOptions()
	opts.ConfigFile = configFile
	opts.SecureServing.BindPort = 0
	ctx, cancel := context.WithCancel(context.Background())
	ext := frameworkext.New()
	cc, sched, err := upstream.Setup(ctx, opts, app.Plugins(ext)...)
	if err != nil {
		cancel()
		e.T.Fatalf("scheduler setup: %v", err)
	}
	if err := ext.Attach(sched); err != nil {
		cancel()
		e.T.Fatal(err)
	}
	s := &Scheduler{Sched: sched, Ext: ext, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = app.Run(ctx, cc, sched, ext)
	}()
	e.T.Cleanup(s.Stop)
	return s
}

// Stop stops the scheduler and waits for it.
func (s *Scheduler) Stop() {
	s.cancel()
	<-s.done
}

// Faults is the fault proxy between the scheduler and kube-apiserver.
type Faults = faultproxy.Proxy

func newFaults(t testing.TB, target *rest.Config) *Faults {
	f, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}
