package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	"github.com/gantry-dev/gantry/internal/repo"
	"github.com/gantry-dev/gantry/test/util"
)

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Config authenticates as a cluster admin (a client certificate of
	// group system:masters).
	Config *rest.Config
	Client kubernetes.Interface
	// Gantry is the generated clientset; its resources are served only
	// after StartWithCRDs (or InstallCRDs of Gantry's CRDs).
	Gantry gantryclient.Interface
	dir    string
}

// logTailLines is how much of each process's log a failed test shows.
const logTailLines = 30

// Start runs etcd and kube-apiserver from <repo>/_output/bin (`make
// build`), with extra kube-apiserver flags ("--name=value"), and waits until
// the apiserver serves the default namespace. Both stop when the test ends;
// their logs are shown if it failed.
func Start(t testing.TB, apiserverArgs ...string) *ControlPlane {
	t.Helper()
	root := Root(t)
	bin := filepath.Join(root, "_output", "bin")
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s not built: run `make build` first (%v)", b, err)
		}
	}
	cp := &ControlPlane{dir: t.TempDir()}
	etcdLog := cp.createLog(t, "etcd")
	apiserverLog := cp.createLog(t, "kube-apiserver")
	certDir := filepath.Join(cp.dir, "kube-apiserver")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		t.Fatal(err)
	}

	env := &envtest.Environment{
		// Paths are set explicitly: envtest would otherwise let
		// KUBEBUILDER_ASSETS swap in a stock kube-apiserver without
		// Gantry's patches.
		ControlPlane: envtest.ControlPlane{
			Etcd: &envtest.Etcd{Path: filepath.Join(bin, "etcd"), DataDir: filepath.Join(cp.dir, "etcd"),
				Out: etcdLog, Err: etcdLog},
			APIServer: &envtest.APIServer{Path: filepath.Join(bin, "kube-apiserver"), CertDir: certDir,
				Out: apiserverLog, Err: apiserverLog},
		},
		ControlPlaneStartTimeout: util.StartupTimeout,
		ControlPlaneStopTimeout:  util.StopTimeout,
	}
	env.ControlPlane.Etcd.Configure().Set("log-level", "warn")
	args := env.ControlPlane.GetAPIServer().Configure()
	// The service CIDR local clusters use.
	args.Set("service-cluster-ip-range", "10.96.0.0/16")
	for _, a := range apiserverArgs {
		if name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			args.Append(name, value) // after envtest's values, as on a command line
		} else {
			args.Enable(name)
		}
	}

	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		_ = etcdLog.Close()
		_ = apiserverLog.Close()
		t.Fatalf("starting etcd and kube-apiserver: %v\n%s", err, cp.logTails())
	}
	t.Cleanup(func() {
		// The logs as they were when the test failed, before shutdown adds
		// to them.
		if t.Failed() {
			t.Logf("the test failed; its control plane's logs end with:\n%s", cp.logTails())
		}
		if err := env.Stop(); err != nil {
			t.Logf("stopping etcd and kube-apiserver: %v", err)
		}
		_ = etcdLog.Close()
		_ = apiserverLog.Close()
	})

	cp.Config = rest.CopyConfig(env.Config)
	cp.Config.QPS, cp.Config.Burst = 100, 200
	var err error
	if cp.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	if cp.Gantry, err = gantryclient.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	return cp
}

// Dir is the control plane's scratch directory (logs, data, certificates),
// removed when the test ends.
func (cp *ControlPlane) Dir() string { return cp.dir }

// Root is the repository checkout holding this test.
func Root(t testing.TB) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func (cp *ControlPlane) createLog(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// logTails is the end of each process's log.
func (cp *ControlPlane) logTails() string {
	var b strings.Builder
	for _, name := range []string{"etcd", "kube-apiserver"} {
		b.WriteString("last lines of the " + name + " log:\n")
		b.WriteString(cp.logTail(name, logTailLines))
		b.WriteString("\n")
	}
	return b.String()
}

func (cp *ControlPlane) logTail(name string, lines int) string {
	data, err := os.ReadFile(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		return "    " + err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "    " + strings.Join(all, "\n    ")
}
