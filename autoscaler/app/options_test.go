package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/test/util"
)

func TestOptionsDefaults(t *testing.T) {
	want := &Options{
		SchedulerName:           "default-scheduler",
		LeaderElect:             true,
		LeaderElectionNamespace: "kube-system",
		MetricsAddress:          ":8443",
		HealthAddress:           ":8083",
		QPS:                     100,
		Burst:                   200,
		PlacementTimeout:        30 * time.Second,
		ScaleDownUnneededTime:   10 * time.Minute,
		ScaleDownInterval:       10 * time.Second,
		ScaleDownTaintGrace:     5 * time.Second,
		MaxPodsPerRequest:       5000,
		MaxBookingsPerNamespace: 5000,
		Workers:                 16,
		UpstreamClasses:         true,
		FinishedRequestTTL:      7 * 24 * time.Hour,
		NodeGroupBackoff:        5 * time.Minute,
		MaxNodeGroupBackoff:     30 * time.Minute,
		SimulationBudget:        2_000_000,
		SimulationTimeout:       30 * time.Second,
		SimulationInstances:     2,

		MaxPodGroupRequestsPerNamespace: 16,
	}
	if diff := cmp.Diff(want, NewOptions()); diff != "" {
		t.Errorf("NewOptions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, util.ParseFlags(t, NewOptions)); diff != "" {
		t.Errorf("after parsing no flags (-want +got):\n%s", diff)
	}
}

func TestOptionsFlags(t *testing.T) {
	o := util.ParseFlags(t, NewOptions,
		"--scheduler-config=/etc/sched.yaml",
		"--scheduler-name=gantry",
		"--leader-elect=false",
		"--leader-election-namespace=gantry-system",
		"--metrics-bind-address=0",
		"--metrics-cert-dir=/etc/certs",
		"--health-probe-bind-address=:9000",
		"--kube-api-qps=5.5",
		"--kube-api-burst=7",
		"--booking-placement-timeout=1m",
		"--node-group-provider=kwok",
		"--node-group-config=/etc/groups.yaml",
		"--scale-down-unneeded-time=0s",
		"--scale-down-interval=3s",
		"--scale-down-taint-grace=1s",
		"--max-pods-per-request=100",
		"--max-bookings-per-namespace=40",
		"--concurrent-provisioning-request-syncs=32",
		"--check-capacity-processor-instance=batch",
		"--serve-upstream-classes=false",
		"--delete-finished-requests-after=0s",
		"--initial-node-group-backoff-duration=10s",
		"--max-node-group-backoff-duration=1m",
		"--simulation-budget=5000",
		"--simulation-timeout=3s",
		"--simulation-instances=4",
		"--pod-group-requests-class=check-capacity.autoscaling.x-k8s.io",
		"--max-pod-group-requests-per-namespace=3",
	)
	want := &Options{
		SchedulerConfig:         "/etc/sched.yaml",
		SchedulerName:           "gantry",
		LeaderElect:             false,
		LeaderElectionNamespace: "gantry-system",
		MetricsAddress:          "0",
		MetricsCertDir:          "/etc/certs",
		HealthAddress:           ":9000",
		QPS:                     5.5,
		Burst:                   7,
		PlacementTimeout:        time.Minute,
		NodeGroupProvider:       "kwok",
		NodeGroupConfig:         "/etc/groups.yaml",
		ScaleDownUnneededTime:   0,
		ScaleDownInterval:       3 * time.Second,
		ScaleDownTaintGrace:     time.Second,
		MaxPodsPerRequest:       100,
		MaxBookingsPerNamespace: 40,
		Workers:                 32,
		ProcessorInstance:       "batch",
		UpstreamClasses:         false,
		FinishedRequestTTL:      0,
		NodeGroupBackoff:        10 * time.Second,
		MaxNodeGroupBackoff:     time.Minute,
		SimulationBudget:        5000,
		SimulationTimeout:       3 * time.Second,
		SimulationInstances:     4,

		PodGroupRequestsClass:           "check-capacity.autoscaling.x-k8s.io",
		MaxPodGroupRequestsPerNamespace: 3,
	}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("parsed options (-want +got):\n%s", diff)
	}
}

func TestNewRefusesWorkersOutOfRange(t *testing.T) {
	for _, n := range []int{0, -1, maxWorkers + 1} {
		o := NewOptions()
		o.Workers = n
		_, err := New(context.Background(), &rest.Config{Host: "https://127.0.0.1:1"}, *o)
		if err == nil || !strings.Contains(err.Error(), "--concurrent-provisioning-request-syncs") {
			t.Errorf("workers %d: %v, want an error naming the flag", n, err)
		}
	}
}

func TestNewRefusesSimulationLimitsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Options)
		flag string
	}{
		{"negative budget", func(o *Options) { o.SimulationBudget = -1 }, "--simulation-budget"},
		{"negative timeout", func(o *Options) { o.SimulationTimeout = -time.Second }, "--simulation-timeout"},
		{"negative instances", func(o *Options) { o.SimulationInstances = -1 }, "--simulation-instances"},
		{"too many instances", func(o *Options) { o.SimulationInstances = maxSimulationInstances + 1 }, "--simulation-instances"},
	} {
		o := NewOptions()
		tc.set(o)
		_, err := New(context.Background(), &rest.Config{Host: "https://127.0.0.1:1"}, *o)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.flag)
		}
	}
}
