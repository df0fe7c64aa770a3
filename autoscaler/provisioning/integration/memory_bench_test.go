//go:build integration

package integration

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// BenchmarkTenantTemplatesMemory: the provisioner's heap as a tenant stores
// 1000 PodTemplates of about 1 MiB that no request names (second review,
// N9). It runs in this process: the heap is measured after a full GC
// before the templates are created and once the provisioner has served a
// request naming the last of them (so its watch has seen them all; that
// one template is read whole, as any template a request names).
// On demand (about 1 GB goes through kube-apiserver into etcd):
//
//	go test -tags integration ./autoscaler/provisioning/integration -run '^$' -bench TenantTemplatesMemory -benchtime 1x
func BenchmarkTenantTemplatesMemory(b *testing.B) {
	const templates, envVars, valueBytes = 1000, 1000, 1000 // about 1 MiB each
	for range b.N {
		b.StopTimer()
		e := newEnv(b)
		e.CreateNodes(3, "4")
		e.StartScheduler(schedtest.GantryProfile)
		e.startProvisioner()
		e.template("default", "workers", "1")
		e.request("default", "before", provv1.ClassCheckCapacity, "workers", 1, nil)
		e.waitCondition("default", "before", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		before := heapAfterGC()

		b.StartTimer()
		fast := rest.CopyConfig(e.Config)
		fast.QPS, fast.Burst = 1000, 1000
		c := kubernetes.NewForConfigOrDie(fast)
		value := strings.Repeat("x", valueBytes)
		benchutil.InParallel(b, templates, 4, func(i int) error {
			pt := wrappers.MakePodTemplate(fmt.Sprintf("big-%04d", i), "default").Requests("cpu", "1").Obj()
			for k := range envVars {
				pt.Template.Spec.Containers[0].Env = append(pt.Template.Spec.Containers[0].Env, v1.EnvVar{Name: fmt.Sprintf("V%04d", k), Value: value})
			}
			_, err := c.CoreV1().PodTemplates("default").Create(context.Background(), pt, metav1.CreateOptions{})
			return err
		})
		// Served once the metadata watch shows the last template, and so,
		// in order, all the others.
		e.request("default", "after", provv1.ClassCheckCapacity, fmt.Sprintf("big-%04d", templates-1), 1, nil)
		e.waitCondition("default", "after", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.LongTimeout)
		b.StopTimer()
		after := heapAfterGC()
		grew := (float64(after) - float64(before)) / (1 << 20)
		b.ReportMetric(grew, "heap-growth-MiB")
		b.ReportMetric(float64(templates*envVars*valueBytes)/(1<<20), "templates-MiB")
		b.Logf("heap %0.1f MiB before, %0.1f MiB after %d templates of %0.1f MiB: grew %0.1f MiB",
			float64(before)/(1<<20), float64(after)/(1<<20), templates, float64(envVars*valueBytes)/(1<<20), grew)
	}
}

// heapAfterGC is the live heap once a full collection has run.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
