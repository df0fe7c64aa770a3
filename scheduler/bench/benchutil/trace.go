package benchutil

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// podTrace is one pod's way through a workload, as a pod watch saw it:
// when it was first seen unbound and when bound, from the start of the
// trace.
type podTrace struct {
	namespace string
	created   time.Duration
	bound     time.Duration
	allocated bool
}

// TracePods, when $GANTRY_BENCH_TRACE is set, records for the workload
// benchmark every pod the watch saw created unbound and then bound: its
// namespace, the times of both events from the moment TracePods was
// called (the workload's nodes and reservations in place), and whether it
// was bound into a reservation. The lines go to $ARTIFACTS/pods.csv, one
// per pod, with the benchmark's name: where in a workload's run its pods
// waited, and which ones (owners with a reservation, owners without one,
// other pods), which a throughput average or a latency percentile cannot
// tell.
func TracePods(tc T, client kubernetes.Interface, benchmark string) {
	if os.Getenv(EnvTrace) == "" {
		return
	}
	start := time.Now()
	var mu sync.Mutex
	pods := map[types.UID]*podTrace{}
	observe := func(p *v1.Pod) {
		at := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		t := pods[p.UID]
		if p.Spec.NodeName == "" {
			if t == nil {
				pods[p.UID] = &podTrace{namespace: p.Namespace, created: at, bound: -1}
			}
			return
		}
		if t != nil && t.bound < 0 {
			t.bound = at
			t.allocated = p.Annotations[schedv1alpha1.AnnotationAllocated] != ""
		}
	}
	stop, err := WatchPods(client, "", observe)
	if err != nil {
		tc.Logf("tracing pods: %v", err)
		return
	}
	tc.Cleanup(func() {
		stop()
		if Artifacts() == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		var b strings.Builder
		for _, t := range pods {
			if t.bound < 0 {
				continue
			}
			fmt.Fprintf(&b, "%s,%s,%.1f,%.1f,%t\n", benchmark, t.namespace,
				float64(t.created.Microseconds())/1000, float64(t.bound.Microseconds())/1000, t.allocated)
		}
		if b.Len() == 0 {
			return
		}
		if err := AppendLines(PodTraceFile, strings.TrimSuffix(b.String(), "\n")); err != nil {
			tc.Logf("recording the pod trace: %v", err)
		}
	})
}
