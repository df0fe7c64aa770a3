package framework

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantry-dev/gantry/internal/repo"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	// The runtimes suites bring clusters up with.
	_ "github.com/gantry-dev/gantry/kind/pkg/runtime/kind"
	_ "github.com/gantry-dev/gantry/kind/pkg/runtime/local"
	"github.com/gantry-dev/gantry/test/util"
)

// Flags of every suite (after `--` on the ginkgo command line).
var (
	artifactsFlag = flag.String("artifacts", "", "where failure artifacts go (default <repo>/_output/e2e-artifacts)")
	nodesFlag     = flag.Int("nodes", defaultNodes, "kwok nodes of a cluster the suite brings up (9 give every zone × instance type; a suite may choose its own with WithNodes, which this flag overrides when given)")
	retainFlag    = flag.Bool("retain", false, "keep a cluster the suite brought up")
	binDirFlag    = flag.String("bin-dir", "", "binaries of a cluster the suite brings up (default <repo>/_output/bin)")
	runtimeFlag   = flag.String("runtime", envOr("GANTRY_RUNTIME", "local"), "runtime of a cluster the suite brings up: local or kind")
	workersFlag   = flag.Int("workers", 2, "worker nodes of a kind cluster the suite brings up, besides its control-plane node")
	planeFlag     = flag.String("control-plane", envOr("GANTRY_CONTROL_PLANE", cluster.ControlPlaneGantry),
		"control plane of a kind cluster the suite brings up: gantry, or stock (upstream's, with Gantry's add-ons as on a managed cluster)")
)

// kubeconfigFlagName is the suites' --kubeconfig: the cluster to test;
// empty (and no KUBECONFIG) brings up a cluster for the suite and removes it
// after. controller-runtime's client/config package registers a flag of
// that name in its init when none is there yet; whichever package
// initialises first defines it, and both read the same value.
const kubeconfigFlagName = "kubeconfig"

func init() {
	if flag.Lookup(kubeconfigFlagName) == nil {
		flag.String(kubeconfigFlagName, "", "cluster to test; empty (and no KUBECONFIG) brings up a cluster for the suite and removes it after")
	}
}

// kubeconfigFlag is the value of --kubeconfig, else KUBECONFIG.
func kubeconfigFlag() string {
	if v := flag.Lookup(kubeconfigFlagName).Value.String(); v != "" {
		return v
	}
	return os.Getenv("KUBECONFIG")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Labels of the suites, for `make e2e FOCUS=<label>`.
const (
	LabelSmoke          = "smoke"
	LabelNarrowing      = "narrowing"
	LabelMetadataPolicy = "metadatapolicy"
	LabelReservation    = "reservation"
	LabelPreemption     = "preemption"
	LabelProvisioning   = "provisioning"
	// LabelInProcess and LabelWebhook mark MetadataPolicy's specs by how
	// admission is deployed: the plugin in Gantry's kube-apiserver, or
	// gantry-webhook behind the stock admission webhooks.
	LabelInProcess = "in-process"
	LabelWebhook   = "webhook"
	// LabelLatency marks the admission latency measurement: `make bench-e2e`
	// runs it; the default e2e run leaves it out.
	LabelLatency = "latency"
	// LabelSecurity marks the attacks of docs/security.md's threat model,
	// each run as a tenant (see Tenant).
	LabelSecurity = "security"
	// LabelInstall marks the day-2 operations of Gantry's install: apply
	// again, rolling updates under load, delete.
	LabelInstall = "install"
	// LabelKueue marks the specs that drive ProvisioningRequests through
	// Kueue's own controller.
	LabelKueue = "kueue"
	// LabelGangs marks the specs of gangs (PodGroups) with Gantry's
	// bookings and preemption, on the gang-scheduling variant of the cluster.
	LabelGangs = "gangs"
	// LabelUpgrade marks the upgrade in place from an earlier release
	// (`make upgrade-test`, build tag upgrade): on demand, never in CI.
	LabelUpgrade = "upgrade"
	// LabelKindSample marks the specs of a suite that `make e2e-kind` (part
	// of `make test`) runs on kind with both control planes besides the
	// suites it runs whole; `make e2e RUNTIME=kind` runs every spec.
	LabelKindSample = "kind-sample"
)

// defaultNodes is the node count of a suite's cluster unless the suite or
// --nodes says otherwise.
const defaultNodes = 9

// Context is what specs share: the cluster and its clients.
type Context struct {
	// Kubeconfig is the cluster's admin kubeconfig.
	Kubeconfig string
	// Config and Client talk to the cluster as its admin.
	Config *rest.Config
	Client kubernetes.Interface
	// Local is the local cluster handle when the cluster is one `make up`
	// or this suite made; nil for any other cluster.
	Local *cluster.Cluster
	// OwnCluster is set when this suite brought the cluster up, and so
	// removes it at the end; a cluster that was already there is kept.
	OwnCluster bool
	// Root is the repository checkout.
	Root string
	// ControlPlane is whose kube-apiserver and scheduler the cluster runs:
	// cluster.ControlPlaneGantry, or cluster.ControlPlaneStock with Gantry's
	// add-ons as on a managed cluster (see useControlPlane).
	ControlPlane string
	// Artifacts is where failure artifacts go.
	Artifacts string
	// ProvisionerArgs are the extra gantry-provisioner flags of the
	// suite's cluster (WithProvisionerArgs); nil on a cluster given by
	// --kubeconfig, which runs with flags of its own.
	ProvisionerArgs []string
}

// TestContext is filled in by SetupSuite before any spec runs.
var TestContext Context

// failedMarker tells the process that tears the cluster down that some
// process saw a spec fail, so component logs must be kept.
const failedMarker = ".failed"

// SuiteOption customizes a suite's cluster.
type SuiteOption func(*suiteOptions)

type suiteOptions struct {
	clusterName   string
	apiserverArgs []string
	nodes         int
	fakeNodesOnly bool
	kueue         bool
	setup         func(ctx context.Context) error
	provisioner   []string
	gangs         bool
	bringUp       func(ctx context.Context, root string, o cluster.Options) error
}

// WithCluster gives the suite's local cluster its own name and extra
// kube-apiserver flags ("name=value"), for suites that need a differently
// configured control plane. The flags are for Gantry's kube-apiserver (such
// as disabling its admission plugins): a stock control plane does not get
// them.
func WithCluster(name string, apiserverArgs ...string) SuiteOption {
	return func(o *suiteOptions) { o.clusterName, o.apiserverArgs = name, apiserverArgs }
}

// WithProvisionerArgs gives gantry-provisioner of the suite's cluster extra
// flags ("name=value", cluster.Options.ProvisionerArgs), for suites that
// need limits a tenant can reach on a small cluster. A cluster given by
// --kubeconfig keeps its own: specs that depend on them call
// RequireProvisionerArg.
func WithProvisionerArgs(args ...string) SuiteOption {
	return func(o *suiteOptions) { o.provisioner = args }
}

// RequireProvisionerArg returns the value WithProvisionerArgs gave the
// provisioner's flag name on the suite's cluster, and skips the spec,
// saying why it needs it, when the cluster runs without it.
func RequireProvisionerArg(name, why string) string {
	for _, a := range slices.Backward(TestContext.ProvisionerArgs) {
		if n, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "="); n == name {
			return v
		}
	}
	ginkgo.Skip(fmt.Sprintf("gantry-provisioner of this cluster runs without the suite's --%s (a cluster given by --kubeconfig keeps its own flags): %s", name, why))
	return ""
}

// WithNodes gives the suite's local cluster n kwok nodes (the first n of
// the topology of kind/pkg/nodes) instead of the default 9; an explicit
// --nodes wins. It has no effect on a cluster given by --kubeconfig.
func WithNodes(n int) SuiteOption {
	return func(o *suiteOptions) { o.nodes = n }
}

// WithFakeNodesOnly keeps the suite's pods off the cluster's real nodes
// (a kind cluster's control-plane node and workers), for suites that
// measure capacity and place pods on their kwok nodes alone: before any
// spec, every node not labelled type=kwok gets RealNodeTaint (NoSchedule,
// so what runs there stays), which neither the scheduler nor
// gantry-provisioner's simulation lets a spec's pod past. A cluster the
// suite did not make gets its nodes back untainted after the suite.
func WithFakeNodesOnly() SuiteOption {
	return func(o *suiteOptions) { o.fakeNodesOnly = true }
}

// WithGangScheduling brings the suite's cluster up as the gang-scheduling
// variant (gantry-cluster up --gang-scheduling, cluster.Options.
// GangScheduling); on a cluster given by --kubeconfig it checks that
// PodGroups are served there.
func WithGangScheduling() SuiteOption {
	return func(o *suiteOptions) { o.gangs = true }
}

// WithBringUp brings the suite's cluster up with bringUp instead of this
// checkout's gantry-cluster: the upgrade suite has an earlier release's
// make it. bringUp gets the options of the cluster the suite then works on
// (its name, work directory, kubeconfig, runtime and control plane), and
// the suite owns and removes the cluster as one it made itself.
func WithBringUp(bringUp func(ctx context.Context, root string, o cluster.Options) error) SuiteOption {
	return func(o *suiteOptions) { o.bringUp = bringUp }
}

// WithKueue installs Kueue into the suite's cluster (gantry-cluster up
// --kueue); on a cluster given by --kubeconfig it checks that Kueue runs
// there (`make up KUEUE=1`).
func WithKueue() SuiteOption {
	return func(o *suiteOptions) { o.kueue = true }
}

// WithSetup runs setup once (on ginkgo process 1) after the cluster is up
// and TestContext is filled in, before any spec; setup may register
// ginkgo.DeferCleanup to undo itself after the suite.
func WithSetup(setup func(ctx context.Context) error) SuiteOption {
	return func(o *suiteOptions) { o.setup = setup }
}

// SetupSuite registers the suite-level setup: bring up a cluster unless one is
// given (once, on ginkgo process 1), build clients on every process, and on
// teardown export component logs if a spec failed, then remove a cluster the
// suite made. Call it at the top level of each suite file:
//
//	var _ = framework.SetupSuite()
func SetupSuite(opts ...SuiteOption) bool {
	var so suiteOptions
	for _, o := range opts {
		o(&so)
	}
	ginkgo.SynchronizedBeforeSuite(func(ctx ginkgo.SpecContext) []byte {
		root, err := repo.Root()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		artifacts := artifactsDir(root)
		gomega.Expect(os.MkdirAll(artifacts, 0o755)).To(gomega.Succeed())
		_ = os.Remove(filepath.Join(artifacts, failedMarker))
		if kc := kubeconfigFlag(); kc != "" {
			ginkgo.GinkgoWriter.Printf("Testing the cluster of kubeconfig %s\n", kc)
			if so.kueue {
				cfg, err := clientcmd.BuildConfigFromFlags("", kc)
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				gomega.Expect(kueue.WaitReady(ctx, cfg, 10*time.Second, nil)).To(gomega.Succeed(),
					"the suite needs Kueue on the cluster: bring it up with `make up KUEUE=1`")
			}
			if so.gangs {
				gomega.Expect(servesPodGroups(ctx, kc)).To(gomega.Succeed(),
					"the suite needs gang scheduling on the cluster: bring it up with `make up UP_FLAGS=--gang-scheduling`")
			}
			return mustJSON(suiteCluster{Kubeconfig: kc})
		}
		c, err := localCluster(root, &so)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		state, err := c.Runtime().State(ctx)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if so.bringUp != nil {
			gomega.Expect(state).To(gomega.Equal(cluster.StateAbsent), "the suite makes its cluster itself: `gantry-cluster down --name %s` the one left", so.clusterName)
			gomega.Expect(so.bringUp(ctx, root, c.Options())).To(gomega.Succeed())
		} else {
			ginkgo.By(fmt.Sprintf("bringing up a local Gantry cluster for the suite (it was %s)", state))
			gomega.Expect(c.Up(ctx)).To(gomega.Succeed())
		}
		return mustJSON(suiteCluster{Kubeconfig: c.Kubeconfig(), Own: state == cluster.StateAbsent, ProvisionerArgs: so.provisioner})
	}, func(data []byte) {
		var sc suiteCluster
		gomega.Expect(json.Unmarshal(data, &sc)).To(gomega.Succeed())
		root, err := repo.Root()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		TestContext.Root = root
		TestContext.Artifacts = artifactsDir(root)
		TestContext.Kubeconfig = sc.Kubeconfig
		TestContext.OwnCluster = sc.Own
		TestContext.ProvisionerArgs = sc.ProvisionerArgs
		TestContext.Config, err = clientcmd.BuildConfigFromFlags("", TestContext.Kubeconfig)
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading kubeconfig %s", TestContext.Kubeconfig)
		TestContext.Config.QPS, TestContext.Config.Burst = 100, 200
		TestContext.Client, err = kubernetes.NewForConfig(TestContext.Config)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		plane, err := detectControlPlane(context.Background())
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		useControlPlane(plane)
		// A cluster made by `make up` or by this suite is ours to inspect.
		if c, err := localCluster(root, &so); err == nil && sameFile(c.Kubeconfig(), TestContext.Kubeconfig) {
			TestContext.Local = c
		}
		if so.fakeNodesOnly && ginkgo.GinkgoParallelProcess() == 1 {
			gomega.Expect(taintRealNodes(context.Background())).To(gomega.Succeed())
		}
		if so.setup != nil && ginkgo.GinkgoParallelProcess() == 1 {
			gomega.Expect(so.setup(context.Background())).To(gomega.Succeed())
		}
	}, ginkgo.NodeTimeout(10*time.Minute))

	ginkgo.SynchronizedAfterSuite(func() {}, func(ctx ginkgo.SpecContext) {
		for _, fn := range slices.Backward(beforeRemoval) {
			fn(ctx)
		}
		failed := fileExists(filepath.Join(TestContext.Artifacts, failedMarker))
		if TestContext.Local != nil && failed {
			dir := filepath.Join(TestContext.Artifacts, "component-logs")
			if err := TestContext.Local.Runtime().ExportLogs(ctx, dir); err != nil {
				ginkgo.GinkgoWriter.Printf("exporting component logs failed: %v\n", err)
			} else {
				ginkgo.GinkgoWriter.Printf("component logs exported to %s\n", dir)
			}
		}
		if TestContext.OwnCluster && TestContext.Local != nil && !*retainFlag {
			ginkgo.By("removing the suite's cluster")
			gomega.Expect(TestContext.Local.Down(ctx)).To(gomega.Succeed())
		}
	}, ginkgo.NodeTimeout(3*time.Minute))

	// Any failing spec, on any process, marks the run as failed.
	ginkgo.ReportAfterEach(func(report ginkgo.SpecReport) {
		if report.Failed() && TestContext.Artifacts != "" {
			_ = os.WriteFile(filepath.Join(TestContext.Artifacts, failedMarker), []byte(report.FullText()), 0o644)
		}
	})
	return true
}

// beforeRemoval are what BeforeClusterRemoval registered.
var beforeRemoval []func(ctx context.Context)

// BeforeClusterRemoval runs fn at the end of the suite on the process that
// registered it, while the suite's cluster is still there (a DeferCleanup
// of a suite's setup runs after the cluster is gone): for a suite's own
// artifacts, such as the logs of workloads it deployed. The last
// registered runs first.
func BeforeClusterRemoval(fn func(ctx context.Context)) {
	beforeRemoval = append(beforeRemoval, fn)
}

// suiteCluster is what process 1 tells the others about the cluster.
type suiteCluster struct {
	Kubeconfig      string
	Own             bool
	ProvisionerArgs []string
}

// servesPodGroups reports an error unless the cluster of kubeconfig kc
// serves PodGroups (scheduling.k8s.io/v1beta1, which kube-apiserver
// serves with the GenericWorkload gate and that API version on).
func servesPodGroups(ctx context.Context, kc string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = c.SchedulingV1beta1().PodGroups(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1})
	return err
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return data
}

func localCluster(root string, so *suiteOptions) (*cluster.Cluster, error) {
	o := &cluster.Options{
		Root:            root,
		Runtime:         *runtimeFlag,
		Workers:         *workersFlag,
		ControlPlane:    *planeFlag,
		Name:            so.clusterName,
		APIServerArgs:   so.apiserverArgs,
		ProvisionerArgs: so.provisioner,
		Nodes:           suiteNodes(so),
		Kueue:           so.kueue,
		GangScheduling:  so.gangs,
		Retain:          *retainFlag,
		BinDir:          *binDirFlag,
		Timeout:         3 * time.Minute,
		Out:             ginkgo.GinkgoWriter,
	}
	if so.clusterName != "" {
		// Its own state and kubeconfig, beside the default cluster's.
		o.WorkDir = filepath.Join(root, "_output", "cluster-"+so.clusterName)
		o.KubeconfigPath = filepath.Join(root, "_output", "kubeconfig-"+so.clusterName)
	}
	if o.ControlPlane == cluster.ControlPlaneStock {
		o.APIServerArgs = nil
	}
	if o.Runtime != "local" {
		// Real nodes boot, pull nothing, and run kubeadm: slower steps.
		o.Timeout = 5 * time.Minute
	}
	return cluster.New(o)
}

// suiteNodes is the node count of the suite's cluster: --nodes if given,
// else the suite's WithNodes, else the default.
func suiteNodes(so *suiteOptions) int {
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "nodes" })
	if !explicit && so.nodes > 0 {
		return so.nodes
	}
	return *nodesFlag
}

func artifactsDir(root string) string {
	if *artifactsFlag != "" {
		return *artifactsFlag
	}
	return filepath.Join(root, "_output", "e2e-artifacts")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// Eventually is gomega's Eventually with the interval of every test's waits
// (util.Interval) and, as anything on a whole e2e cluster, util.LongTimeout;
// a local kwok cluster meets it with a wide margin, a loaded CI machine
// still does.
func Eventually(ctx context.Context, actual any) gomega.AsyncAssertion {
	return gomega.Eventually(ctx, actual).WithPolling(util.Interval).WithTimeout(util.LongTimeout)
}

// Describe is ginkgo.Describe with the suite's label prefixed with [gantry].
func Describe(text string, args ...any) bool {
	return ginkgo.Describe(fmt.Sprintf("[gantry] %s", text), args...)
}
