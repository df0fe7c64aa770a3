package profiles_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/scheduler/app"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/profiles"
)

var update = flag.Bool("update", false, "rewrite the files generated from gantry.yaml")

// root is the repository checkout, from this package's directory.
const root = "../.."

// TestGeneratedFilesAreCurrent fails when a file generated from gantry.yaml
// was edited by hand, or gantry.yaml changed without regenerating it.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	for path, want := range profiles.Generated() {
		file := filepath.Join(root, path)
		if *update {
			if err := os.WriteFile(file, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")); diff != "" {
			t.Errorf("%s is not what scheduler/profiles/gantry.yaml gives (-want +got):\n%s\nRun `go test ./scheduler/profiles -update`.", path, diff)
		}
	}
}

// The rendered YAML reads back as the profiles it was rendered from:
// nothing is dropped or changed on the way.
func TestRenderingRoundTrips(t *testing.T) {
	for name, ps := range map[string][]configv1.KubeSchedulerProfile{
		"local cluster":    profiles.LocalCluster(),
		"cluster":          profiles.Cluster("default-scheduler"),
		"second scheduler": profiles.Cluster(profiles.SecondSchedulerName),
		"scheduler_perf":   profiles.SchedulerPerf(),
	} {
		t.Run(name, func(t *testing.T) {
			var cfg configv1.KubeSchedulerConfiguration
			if err := yaml.UnmarshalStrict(profiles.Config("", ps...), &cfg); err != nil {
				t.Fatal(err)
			}
			normalize := func(ps []configv1.KubeSchedulerProfile) []configv1.KubeSchedulerProfile {
				out := make([]configv1.KubeSchedulerProfile, len(ps))
				for i, p := range ps {
					p.PluginConfig = append([]configv1.PluginConfig(nil), p.PluginConfig...)
					for j, pc := range p.PluginConfig {
						var args any
						if err := json.Unmarshal(pc.Args.Raw, &args); err != nil {
							t.Fatal(err)
						}
						pc.Args.Raw, _ = json.Marshal(args)
						p.PluginConfig[j] = pc
					}
					out[i] = p
				}
				return out
			}
			if diff := cmp.Diff(normalize(ps), normalize(cfg.Profiles)); diff != "" {
				t.Errorf("profiles read back (-rendered +read):\n%s", diff)
			}
		})
	}
	p := profiles.Gantry()
	if p.Plugins == nil || len(p.Plugins.MultiPoint.Enabled) == 0 || p.SchedulerName != nil || p.PluginConfig != nil {
		t.Errorf("gantry.yaml is not a profile's plugins section: %+v", p)
	}
}

// The second scheduler takes its own lease, so that it never contends with
// the cluster's kube-scheduler for kube-system/kube-scheduler.
func TestSecondSchedulerHasItsOwnLease(t *testing.T) {
	var cfg configv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(profiles.SecondSchedulerConfig("# header\n", profiles.Cluster(profiles.SecondSchedulerName)...), &cfg); err != nil {
		t.Fatal(err)
	}
	le := cfg.LeaderElection
	if le.LeaderElect == nil || !*le.LeaderElect || le.ResourceLock != "leases" ||
		le.ResourceName != "gantry-scheduler" || le.ResourceNamespace != "gantry-system" {
		t.Errorf("leaderElection %+v, want leases gantry-system/gantry-scheduler", le)
	}
	for _, p := range cfg.Profiles {
		if name := *p.SchedulerName; name == "default-scheduler" {
			t.Errorf("the second scheduler has a profile %s: it would take the cluster scheduler's pods", name)
		}
	}
}

// Each generated configuration starts Gantry's scheduler as kube-scheduler
// loads it: strictly decoded, with Gantry's plugins registered through the
// extension layer and the layer attached (which checks that Reservation
// binds first). The local cluster's profiles must agree on Reservation's
// args, or the scheduler refuses to start.
func TestGeneratedConfigurationsStart(t *testing.T) {
	metrics.Register()
	for path := range profiles.Generated() {
		t.Run(path, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			cfg, err := options.LoadConfigFromFile(logger, filepath.Join(root, path))
			if err != nil {
				t.Fatal(err)
			}
			sched := newScheduler(t, cfg)
			if len(sched.Profiles) != len(cfg.Profiles) {
				t.Errorf("%d profiles built, want %d", len(sched.Profiles), len(cfg.Profiles))
			}
		})
	}
}

// TestGantryPluginsKeepBatching: opportunistic batching (KEP-5598, on by
// default in 1.36) is off for a whole profile when one of its PreFilter,
// Filter, PreScore or Score plugins cannot sign pods, and a pod is signed
// only if every plugin signs it. Upstream's PodTopologySpread signs no pod
// while it has default constraints (the system defaults, as shipped), so
// each profile is built here with them listed empty; then upstream's
// default profile signs a plain pod, and every profile Gantry ships must
// too.
func TestGantryPluginsKeepBatching(t *testing.T) {
	metrics.Register()
	build := func(t *testing.T, cfg *config.KubeSchedulerConfiguration) *scheduler.Scheduler {
		t.Helper()
		for i := range cfg.Profiles {
			for j, pc := range cfg.Profiles[i].PluginConfig {
				if args, ok := pc.Args.(*config.PodTopologySpreadArgs); ok {
					args = args.DeepCopy()
					args.DefaultingType, args.DefaultConstraints = config.ListDefaulting, nil
					cfg.Profiles[i].PluginConfig[j].Args = args
				}
			}
		}
		return newScheduler(t, cfg)
	}
	signs := func(t *testing.T, sched *scheduler.Scheduler) {
		t.Helper()
		_, ctx := ktesting.NewTestContext(t)
		for name, f := range sched.Profiles {
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain", UID: "plain"},
				Spec:       v1.PodSpec{SchedulerName: name, Containers: []v1.Container{{Name: "c", Image: "pause"}}},
			}
			if f.SignPod(ctx, pod) == nil {
				t.Errorf("profile %s signs no pod: one of its plugins turns opportunistic batching off", name)
			}
		}
	}
	t.Run("upstream's default profile", func(t *testing.T) {
		logger, _ := ktesting.NewTestContext(t)
		cfg, err := options.LoadConfigFromFile(logger, writeConfig(t, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"))
		if err != nil {
			t.Fatal(err)
		}
		signs(t, build(t, cfg))
	})
	for path := range profiles.Generated() {
		if !strings.HasSuffix(path, ".yaml") {
			continue
		}
		t.Run(path, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			cfg, err := options.LoadConfigFromFile(logger, filepath.Join(root, path))
			if err != nil {
				t.Fatal(err)
			}
			signs(t, build(t, cfg))
		})
	}
}

// newScheduler builds Gantry's scheduler from cfg as kube-scheduler does,
// with Gantry's plugins registered through the extension layer, and
// attaches the layer. It is not run.
func newScheduler(t *testing.T, cfg *config.KubeSchedulerConfiguration) *scheduler.Scheduler {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	client := fake.NewClientset()
	ext := frameworkext.New()
	sched, err := scheduler.New(ctx, client, informers.NewSharedInformerFactory(client, 0), nil,
		profile.NewRecorderFactory(events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})),
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithKubeConfig(&rest.Config{Host: "https://127.0.0.1:1"}),
		scheduler.WithFrameworkOutOfTreeRegistry(ext.Wrap(app.Registry())))
	if err != nil {
		t.Fatalf("building the scheduler: %v", err)
	}
	if err := ext.Attach(sched); err != nil {
		t.Fatalf("attaching the extension layer: %v", err)
	}
	return sched
}

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// schedtest's profile is Gantry's: the body of a profile item that decodes
// to gantry.yaml's plugins.
func TestBodyIsGantrysProfile(t *testing.T) {
	var cfg configv1.KubeSchedulerConfiguration
	doc := "profiles:\n- schedulerName: default-scheduler\n" + profiles.Body(profiles.Gantry())
	if err := yaml.UnmarshalStrict([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(profiles.Gantry().Plugins, cfg.Profiles[0].Plugins); diff != "" {
		t.Errorf("plugins (-gantry.yaml +body):\n%s", diff)
	}
	if !bytes.Contains(profiles.Config("", profiles.SchedulerPerf()...), []byte(profiles.Body(profiles.Gantry()))) {
		t.Error("scheduler_perf's profile is not written as schedtest's")
	}
}
