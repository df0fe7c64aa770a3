//go:build kueue_bench

package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	"github.com/gantry-dev/gantry/internal/repo"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	// The runtime the benchmark brings its cluster up with.
	_ "github.com/gantry-dev/gantry/kind/pkg/runtime/local"
)

// Flags (after -args on the go test command line).
var (
	nodesFlag   = flag.Int("nodes", 500, "kwok nodes of the cluster")
	jobsFlag    = flag.String("jobs", "100,500", "comma-separated Job counts, one sub-benchmark each")
	podsFlag    = flag.Int("pods-per-job", 1, "pods of each Job (parallelism and completions)")
	retainFlag  = flag.Bool("retain", false, "keep the cluster the benchmark brought up")
	timeoutFlag = flag.Duration("admission-timeout", 20*time.Minute, "how long all Jobs of a run may take to be Admitted")
)

// kubeconfigFlagName: a cluster with Kueue to measure (`make up KUEUE=1`);
// empty brings up the local cluster clusterName and removes it after.
// Registered unless a package linked here (controller-runtime's
// client/config) registered a flag of that name first.
const kubeconfigFlagName = "kubeconfig"

func init() {
	if flag.Lookup(kubeconfigFlagName) == nil {
		flag.String(kubeconfigFlagName, "", "cluster with Kueue to measure (`make up KUEUE=1`); empty brings up a local cluster of its own and removes it after")
	}
}

// clusterName is the local cluster the benchmark brings up, beside (not
// instead of) the one `make up` makes.
const clusterName = "kueue-bench"

// benchCluster is the cluster every run of the process measures.
type benchCluster struct {
	config  *rest.Config
	client  kubernetes.Interface
	gantry  gantryclient.Interface
	dyn     dynamic.Interface
	local   *cluster.Cluster // nil on a cluster given by -kubeconfig
	own     bool             // brought up here: removed at the end
	nodes   int
	upTaken time.Duration
}

var (
	theCluster *benchCluster
	clusterErr error
	clusterOne sync.Once
)

// sharedCluster brings the cluster up (once per process) with -nodes kwok
// nodes and Kueue, or checks the one of -kubeconfig.
func sharedCluster(tb testing.TB) *benchCluster {
	tb.Helper()
	clusterOne.Do(func() { theCluster, clusterErr = setUp(context.Background()) })
	if clusterErr != nil {
		tb.Fatal(clusterErr)
	}
	return theCluster
}

func setUp(ctx context.Context) (*benchCluster, error) {
	start := time.Now()
	bc := &benchCluster{nodes: *nodesFlag}
	kubeconfig := flag.Lookup(kubeconfigFlagName).Value.String()
	if kubeconfig == "" {
		root, err := repo.Root()
		if err != nil {
			return nil, err
		}
		c, err := cluster.New(&cluster.Options{
			Root:           root,
			Name:           clusterName,
			Runtime:        "local",
			WorkDir:        filepath.Join(root, "_output", "cluster-"+clusterName),
			KubeconfigPath: filepath.Join(root, "_output", "kubeconfig-"+clusterName),
			Nodes:          *nodesFlag,
			Kueue:          true,
			Retain:         *retainFlag,
			Timeout:        5 * time.Minute,
			Out:            os.Stderr,
		})
		if err != nil {
			return nil, err
		}
		state, err := c.Runtime().State(ctx)
		if err != nil {
			return nil, err
		}
		if err := c.Up(ctx); err != nil {
			return nil, err
		}
		bc.local, bc.own, kubeconfig = c, state == cluster.StateAbsent, c.Kubeconfig()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	// The benchmark's own client: creating Jobs as fast as Kueue's webhook
	// and kube-apiserver take them, and cleaning up.
	cfg.QPS, cfg.Burst = 5000, 5000
	cfg.WarningHandler = rest.NoWarnings{}
	bc.config = cfg
	bc.client = kubernetes.NewForConfigOrDie(cfg)
	bc.gantry = gantryclient.NewForConfigOrDie(cfg)
	bc.dyn = dynamic.NewForConfigOrDie(cfg)
	if err := kueue.WaitReady(ctx, cfg, time.Minute, nil); err != nil {
		return nil, fmt.Errorf("the benchmark needs Kueue on the cluster (`make up KUEUE=1`): %w", err)
	}
	if err := bc.exactNodes(ctx); err != nil {
		return nil, err
	}
	bc.upTaken = time.Since(start)
	return bc, nil
}

// exactNodes makes the cluster's kwok nodes exactly -nodes: those missing
// are created (on a cluster of -kubeconfig, or a retained cluster of
// fewer), those beyond deleted (a retained cluster of more), and all of
// them Ready.
func (bc *benchCluster) exactNodes(ctx context.Context) error {
	want := nodes.Topology(bc.nodes)
	if _, err := nodes.Ensure(ctx, bc.client, want); err != nil {
		return err
	}
	keep := make(map[string]bool, len(want))
	for _, n := range want {
		keep[n.Name] = true
	}
	list, err := bc.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodes.ManagedLabel + "=true"})
	if err != nil {
		return err
	}
	for _, n := range list.Items {
		if !keep[n.Name] {
			if err := bc.client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("deleting node %s beyond -nodes=%d: %w", n.Name, bc.nodes, err)
			}
		}
	}
	return nodes.WaitReady(ctx, bc.client, bc.nodes, 5*time.Minute)
}

// tearDown removes a cluster the benchmark brought up, unless -retain.
func tearDown() {
	if theCluster == nil || !theCluster.own || *retainFlag {
		if theCluster != nil && theCluster.local != nil {
			fmt.Fprintf(os.Stderr, "cluster %q kept: kubeconfig %s\n", clusterName, theCluster.local.Kubeconfig())
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := theCluster.local.Down(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "removing cluster %q: %v\n", clusterName, err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	printTable(os.Stdout)
	tearDown()
	os.Exit(code)
}
