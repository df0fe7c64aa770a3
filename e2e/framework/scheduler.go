package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// GantryClient returns a clientset of Gantry's API groups for the suite's
// cluster. It speaks JSON: custom resources are not served as protobuf.
func GantryClient() (gantryclient.Interface, error) {
	cfg := rest.CopyConfig(TestContext.Config)
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	return gantryclient.NewForConfig(cfg)
}

// RequireLocal returns the local cluster handle, and skips the spec, saying
// why it needs one, when the suite tests a cluster it cannot reach into
// (component endpoints, logs, restarts).
func RequireLocal(why string) *cluster.Cluster {
	if TestContext.Local == nil {
		ginkgo.Skip("needs a cluster made by Gantry's cluster program: " + why)
	}
	return TestContext.Local
}

// SchedulerGetJSON GETs path on kube-scheduler's secure port, with the
// credentials its metrics are scraped with, and decodes the JSON answer
// into out. An answer other than 2xx is a *cluster.ComponentHTTPError.
func SchedulerGetJSON(ctx context.Context, path string, out any) error {
	body, err := RequireLocal("it calls kube-scheduler's endpoints").ComponentGet(ctx, SchedulerComponent, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding the answer to GET %s: %w\n%s", path, err, body)
	}
	return nil
}

// SchedulerNodeView is kube-scheduler's view of node, from its cache, as
// GET /gantry/v1/nodes/{node} serves it.
func SchedulerNodeView(ctx context.Context, node string) (*frameworkext.NodeView, error) {
	v := &frameworkext.NodeView{}
	return v, SchedulerGetJSON(ctx, frameworkext.ServicesPrefix+"nodes/"+node, v)
}

// SchedulerRequestAs sends method path (with body, if not empty) to
// kube-scheduler's secure port as the identity of a bearer token, and
// returns the answer's status code. It skips the spec when the cluster's
// runtime cannot do that.
func SchedulerRequestAs(ctx context.Context, token, method, path, body string) (int, error) {
	rt, ok := RequireLocal("it calls kube-scheduler's endpoints").Runtime().(interface {
		ComponentRequestAs(ctx context.Context, component, token, method, path string, body []byte) (int, []byte, error)
	})
	if !ok {
		ginkgo.Skip("the cluster's runtime cannot call kube-scheduler with another identity")
	}
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	code, _, err := rt.ComponentRequestAs(ctx, SchedulerComponent, token, method, path, b)
	return code, err
}

// SchedulerPut PUTs body to path on kube-scheduler's secure port and
// returns the answer.
func SchedulerPut(ctx context.Context, path, body string) (string, error) {
	out, err := RequireLocal("it calls kube-scheduler's endpoints").ComponentPut(ctx, SchedulerComponent, path, []byte(body))
	return string(out), err
}

// SchedulerVerbosity sets kube-scheduler's log verbosity to v (PUT
// /debug/flags/v, served with profiling on, as on the local cluster) and
// returns a func that sets it back to 0, the local cluster's default. It
// fails the spec if the scheduler refuses.
func SchedulerVerbosity(ctx context.Context, v int) func(context.Context) {
	_, err := SchedulerPut(ctx, "/debug/flags/v", fmt.Sprint(v))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "setting kube-scheduler's verbosity to %d", v)
	return func(ctx context.Context) {
		_, err := SchedulerPut(ctx, "/debug/flags/v", "0")
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "setting kube-scheduler's verbosity back to 0")
	}
}

// ComponentLog returns the log of the running process of a control-plane
// component (a restart starts a new one).
func ComponentLog(component string) (string, error) {
	return RequireLocal("it reads component logs").Runtime().LogTail(component, math.MaxInt)
}

// SchedulerLeader returns the holder of kube-scheduler's leader lease, ""
// when nobody holds it.
func SchedulerLeader(ctx context.Context) (string, error) {
	lease, err := TestContext.Client.CoordinationV1().Leases(schedulerLease.Namespace).Get(ctx, schedulerLease.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

// RestartScheduler stops kube-scheduler with sig (SIGTERM: a graceful
// shutdown that releases the leader lease; SIGKILL: a crash, after which
// the new process waits for the lease to expire), starts it again, and
// waits until the new process holds the lease and is ready. It returns the
// new lease holder.
func RestartScheduler(ctx context.Context, sig syscall.Signal) string {
	c := RequireLocal("it restarts kube-scheduler")
	before, err := SchedulerLeader(ctx)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading kube-scheduler's lease")
	start := time.Now()
	gomega.Expect(c.RestartComponent(ctx, SchedulerComponent, sig)).To(gomega.Succeed())
	var after string
	Eventually(ctx, func(g gomega.Gomega) {
		var err error
		after, err = SchedulerLeader(ctx)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(after).NotTo(gomega.BeEmpty(), "nobody holds the lease")
		g.Expect(after).NotTo(gomega.Equal(before), "the stopped process still holds the lease")
	}).Should(gomega.Succeed(), "the restarted kube-scheduler did not take the leader lease")
	Eventually(ctx, func() error {
		body, err := c.ComponentGet(ctx, SchedulerComponent, "/readyz")
		if err == nil && strings.TrimSpace(string(body)) != "ok" {
			err = fmt.Errorf("/readyz: %s", body)
		}
		return err
	}).Should(gomega.Succeed(), "the restarted kube-scheduler is not ready")
	ginkgo.GinkgoWriter.Printf("kube-scheduler restarted with %s and leading again after %s (lease holder %s)\n",
		sig, time.Since(start).Round(100*time.Millisecond), after)
	return after
}

// LogLines returns the lines of log that contain s.
func LogLines(log, s string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// DumpScheduler writes kube-scheduler's view of a spec into its artifacts:
// its cache's view of nodes, its gantry_* metrics, and the lines of its log
// about the spec's namespace. It writes nothing when the cluster is not a
// local one; what it cannot get it reports and skips.
func DumpScheduler(ctx context.Context, namespace string, nodes []v1.Node) {
	if TestContext.Local == nil {
		return
	}
	views := map[string]any{}
	for _, n := range nodes {
		v, err := SchedulerNodeView(ctx, n.Name)
		if err != nil {
			views[n.Name] = err.Error()
			continue
		}
		views[n.Name] = v
	}
	WriteSpecArtifactJSON("scheduler-nodes.json", views)
	if m, err := SchedulerMetrics(ctx); err == nil {
		var lines []string
		for k, v := range m {
			if strings.HasPrefix(k, "gantry_") {
				lines = append(lines, fmt.Sprintf("%s %v", k, v))
			}
		}
		slices.Sort(lines)
		WriteSpecArtifact("scheduler-metrics.txt", []byte(strings.Join(lines, "\n")+"\n"))
	} else {
		ginkgo.GinkgoWriter.Printf("scraping kube-scheduler's metrics: %v\n", err)
	}
	if log, err := ComponentLog(SchedulerComponent); err == nil {
		WriteSpecArtifact("kube-scheduler.log", []byte(strings.Join(LogLines(log, namespace+"/"), "\n")+"\n"))
	} else {
		ginkgo.GinkgoWriter.Printf("reading kube-scheduler's log: %v\n", err)
	}
	ginkgo.GinkgoWriter.Printf("kube-scheduler's nodes, metrics and log lines of the spec written to %s\n", SpecArtifacts())
}
