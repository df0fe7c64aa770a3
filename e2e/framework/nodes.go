package framework

import (
	"context"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/gantry-dev/gantry/kind/pkg/nodes"
)

// KwokNodes returns the cluster's kwok nodes sorted by name; the spec
// fails when there are fewer than atLeast.
func KwokNodes(ctx context.Context, atLeast int) []v1.Node {
	ginkgo.GinkgoHelper()
	list, err := TestContext.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodes.ManagedLabel + "=true"})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "listing the kwok nodes")
	gomega.Expect(len(list.Items)).To(gomega.BeNumerically(">=", atLeast), "the suite needs %d kwok nodes", atLeast)
	slices.SortFunc(list.Items, func(a, b v1.Node) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// ExpectIdle waits until no pod is bound to one of nodes, and, on a local
// cluster, kube-scheduler's cache agrees, and more (when not nil) passes:
// a spec fills nodes from zero.
func ExpectIdle(ctx context.Context, nodes []v1.Node, more func(g gomega.Gomega)) {
	ginkgo.GinkgoHelper()
	Eventually(ctx, func(g gomega.Gomega) {
		if more != nil {
			more(g)
		}
		pods, err := TestContext.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		var bound []string
		for _, p := range pods.Items {
			if slices.ContainsFunc(nodes, func(n v1.Node) bool { return n.Name == p.Spec.NodeName }) {
				bound = append(bound, p.Namespace+"/"+p.Name)
			}
		}
		g.Expect(bound).To(gomega.BeEmpty(), "pods left on the kwok nodes")
		if TestContext.Local == nil {
			return
		}
		for _, n := range nodes {
			v, err := SchedulerNodeView(ctx, n.Name)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(v.Pods).To(gomega.BeEmpty(), "the scheduler's cache still has pods on %s", n.Name)
		}
	}).Should(gomega.Succeed(), "the kwok nodes are not idle")
}

// EndSpec ends a spec that used nodes. When it failed, kube-scheduler's
// view of them, and whatever dump (when not nil) writes, go to the spec's
// artifacts, and its pods stay for the framework's dump of the namespace;
// when it passed, its workloads and pods are deleted at once. Its
// reservations are deleted either way. Register it with
// ginkgo.DeferCleanup in a BeforeEach.
func (f *Framework) EndSpec(ctx context.Context, nodes []v1.Node, dump func(ctx context.Context)) {
	ginkgo.GinkgoHelper()
	failed := ginkgo.CurrentSpecReport().Failed()
	if failed {
		DumpScheduler(ctx, f.Namespace, nodes)
		if dump != nil {
			dump(ctx)
		}
	}
	f.DeleteReservations(ctx)
	if !failed {
		f.DeleteWorkloads(ctx)
	}
}

// RealNodeTaint is the taint WithFakeNodesOnly puts on a cluster's real
// nodes for the length of a suite.
var RealNodeTaint = v1.Taint{Key: "e2e.gantry.dev/real-node", Effect: v1.TaintEffectNoSchedule}

// taintRealNodes puts RealNodeTaint on every node that is not a kwok node
// (labelled type=kwok: the suite's and gantry-provisioner's), and takes it
// off again after the suite unless the cluster goes with the suite.
func taintRealNodes(ctx context.Context) error {
	c := TestContext.Client.CoreV1().Nodes()
	list, err := c.List(ctx, metav1.ListOptions{LabelSelector: "type notin (kwok)"})
	if err != nil {
		return err
	}
	for _, n := range list.Items {
		if err := setTaint(ctx, n.Name, true); err != nil {
			return err
		}
		ginkgo.GinkgoWriter.Printf("node %s tainted %s for the suite: its pods run on kwok nodes only\n", n.Name, RealNodeTaint.ToString())
		if !TestContext.OwnCluster {
			ginkgo.DeferCleanup(setTaint, n.Name, false)
		}
	}
	return nil
}

// setTaint puts RealNodeTaint on node, or takes it off.
func setTaint(ctx context.Context, node string, on bool) error {
	c := TestContext.Client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ours := func(t v1.Taint) bool { return t.MatchTaint(&RealNodeTaint) }
		has := slices.ContainsFunc(n.Spec.Taints, ours)
		if has == on {
			return nil
		}
		if on {
			n.Spec.Taints = append(n.Spec.Taints, RealNodeTaint)
		} else {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, ours)
		}
		_, err = c.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
