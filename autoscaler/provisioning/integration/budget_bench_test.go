//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/app"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
)

// preferredAffinity pods would rather share a node: no Filter reads it.
func preferredAffinity(spec *v1.PodSpec, selector *metav1.LabelSelector) {
	spec.Affinity = &v1.Affinity{PodAffinity: &v1.PodAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{{Weight: 100,
			PodAffinityTerm: v1.PodAffinityTerm{LabelSelector: selector, TopologyKey: v1.LabelHostname}}},
	}}
}

// hostPort pods take host port 8080: one a node.
func hostPort(spec *v1.PodSpec, _ *metav1.LabelSelector) {
	spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 8080, HostPort: 8080, Protocol: v1.ProtocolTCP}}
}

// delayRuns counts the runs of BenchmarkTenantShapesDelay's shapes.
var delayRuns int

// BenchmarkTenantShapesDelay: the delay the shapes that make a simulation
// expensive cause to another namespace's booking, through the provisioner
// with its default budget and instances. On 500 and 5000 nodes, namespace
// greedy creates 20 check-capacity requests (no retry) of N+1 pods of a
// shape, one pod a node, so none fits and each attempt costs the most it
// can; then namespace other creates a request for 10 one-CPU pods. It
// reports the seconds until other's request is Provisioned, counted from
// before greedy's first create and from other's own, how many of greedy's
// were decided by then, and the seconds until all of greedy's were. Run on demand (setting up 5000 nodes takes minutes):
//
//	go test -tags integration ./autoscaler/provisioning/integration -run '^$' -bench TenantShapesDelay -benchtime 1x -count 3 -timeout 2h
func BenchmarkTenantShapesDelay(b *testing.B) {
	shapes := []struct {
		name   string
		shapes []shape
	}{
		{"PreferredAffinityHostPort", []shape{preferredAffinity, hostPort}},
		{"RequiredAntiAffinity", []shape{antiAffine}},
		{"SpreadHostPort", []shape{spreadOverNodes(1), hostPort}},
	}
	const greedy = 20
	for _, nodes := range []int{500, 5000} {
		b.Run(fmt.Sprintf("Nodes%d", nodes), func(b *testing.B) {
			e := newEnv(b)
			e.CreateNodes(nodes, "8")
			e.StartScheduler(schedtest.GantryProfile)
			e.startProvisioner(func(o *app.Options) { o.MaxPodsPerRequest = nodes + 1 })
			ctx := context.Background()
			for _, sh := range shapes {
				b.Run(sh.name, func(b *testing.B) {
					// The control plane outlives a run, which the
					// framework may start more than once: each names its
					// namespaces anew.
					delayRuns++
					run := delayRuns
					for i := range b.N {
						ns := fmt.Sprintf("%s-%d-%d", strings.ToLower(sh.name), run, i)
						greedyNS, otherNS := "greedy-"+ns, "other-"+ns
						for _, n := range []string{greedyNS, otherNS} {
							e.namespaceWithQuota(n, "1000000")
						}
						e.shapedTemplate(greedyNS, "shaped", "100m", sh.shapes...)
						e.template(otherNS, "small", "1")
						start := time.Now()
						for r := range greedy {
							e.request(greedyNS, fmt.Sprintf("r%d", r), provv1.ClassCheckCapacity, "shaped", int32(nodes+1),
								map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
						}
						otherCreated := time.Now()
						e.request(otherNS, "small", provv1.ClassCheckCapacity, "small", 10, nil)
						e.waitCondition(otherNS, "small", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.BenchmarkTimeout)
						delay, wait := time.Since(start), time.Since(otherCreated)
						decided := func() int {
							list, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(greedyNS).List(ctx, metav1.ListOptions{})
							if err != nil {
								b.Fatal(err)
							}
							n := 0
							for _, pr := range list.Items {
								if meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionFailed) {
									n++
								}
							}
							return n
						}
						atOther := decided()
						if err := util.Poll(ctx, util.BenchmarkTimeout, "greedy's requests decided", func(context.Context) (bool, error) {
							return decided() == greedy, nil
						}); err != nil {
							b.Fatal(err)
						}
						all := time.Since(start)
						list, _ := e.Gantry.AutoscalingXV1().ProvisioningRequests(greedyNS).List(ctx, metav1.ListOptions{})
						if len(list.Items) > 0 {
							c := meta.FindStatusCondition(list.Items[0].Status.Conditions, provv1.ConditionFailed)
							b.Logf("%s on %d nodes: greedy's first request: %s: %s", sh.name, nodes, c.Reason, c.Message)
						}
						b.ReportMetric(delay.Seconds(), "s-to-other-provisioned")
						b.ReportMetric(wait.Seconds(), "s-other-created-to-provisioned")
						b.ReportMetric(float64(atOther), "greedy-decided-by-then")
						b.ReportMetric(all.Seconds(), "s-to-greedy-decided")
						e.deleteRequest(otherNS, "small")
					}
				})
			}
		})
	}
}
