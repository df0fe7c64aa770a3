package profiles

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gantryconfigv1 "github.com/gantry-dev/gantry/scheduler/apis/config/v1"
)

//go:embed gantry.yaml
var gantryYAML []byte

// Gantry returns Gantry's profile as gantry.yaml writes it: plugins only,
// no name and no pluginConfig. Each call returns a new copy.
func Gantry() configv1.KubeSchedulerProfile {
	var p configv1.KubeSchedulerProfile
	if err := yaml.UnmarshalStrict(gantryYAML, &p); err != nil {
		panic(fmt.Sprintf("scheduler/profiles: gantry.yaml: %v", err)) // embedded; the package's test decodes it
	}
	return p
}

// BestEffortProfile is the second profile of Gantry's scheduler, which
// MetadataPolicies can route pods to (e.g. BestEffort pods).
const BestEffortProfile = "gantry-best-effort"

// SecondSchedulerName is the name Gantry's kube-scheduler answers to where it
// runs beside the cluster's own scheduler (a managed cluster,
// config/overlays/managed): pods that name it are Gantry's, every other pod
// is left to the cluster's scheduler. Its leader lease has the same name,
// in SecondSchedulerNamespace.
const SecondSchedulerName = "gantry-scheduler"

// SecondSchedulerNamespace is where the second scheduler runs and keeps its
// leader lease.
const SecondSchedulerNamespace = "gantry-system"

// LocalTerminalReservationTTL is how long the local cluster keeps a
// terminal reservation (production's default is 10m; a local cluster is for
// trying things out).
const LocalTerminalReservationTTL = 2 * time.Minute

// LocalCluster returns the profiles of the local cluster's kube-scheduler:
// Cluster(default-scheduler) with terminal reservations kept only
// LocalTerminalReservationTTL.
func LocalCluster() []configv1.KubeSchedulerProfile {
	args, err := json.Marshal(gantryconfigv1.ReservationArgs{
		TerminalReservationTTL: &metav1.Duration{Duration: LocalTerminalReservationTTL},
	})
	if err != nil {
		panic(err)
	}
	return cluster(v1.DefaultSchedulerName, []configv1.PluginConfig{{Name: "Reservation", Args: runtime.RawExtension{Raw: args}}})
}

// Cluster returns the profiles of Gantry's kube-scheduler in a cluster:
// Gantry's profile as name, and as gantry-best-effort, which also leaves
// NodeResourcesBalancedAllocation out of scoring; the plugins keep their
// default args.
func Cluster(name string) []configv1.KubeSchedulerProfile { return cluster(name, nil) }

// cluster is Cluster with pluginConfig given to both profiles, as
// Reservation requires of profiles that run it.
func cluster(name string, pluginConfig []configv1.PluginConfig) []configv1.KubeSchedulerProfile {
	def := Gantry()
	def.SchedulerName = ptr.To(name)
	def.PluginConfig = pluginConfig

	be := Gantry()
	be.SchedulerName = ptr.To(BestEffortProfile)
	be.Plugins.Score.Disabled = append(be.Plugins.Score.Disabled, configv1.Plugin{Name: "NodeResourcesBalancedAllocation"})
	be.PluginConfig = pluginConfig
	return []configv1.KubeSchedulerProfile{def, be}
}

// SchedulerPerf returns the profiles of scheduler_perf's Gantry workloads:
// Gantry's profile as default-scheduler, with the plugins' default args.
func SchedulerPerf() []configv1.KubeSchedulerProfile {
	p := Gantry()
	p.SchedulerName = ptr.To(v1.DefaultSchedulerName)
	return []configv1.KubeSchedulerProfile{p}
}

// Generated returns the files rendered from gantry.yaml, by path from the
// repository root.
func Generated() map[string][]byte {
	const marker = "# Code generated from scheduler/profiles/gantry.yaml by `go test ./scheduler/profiles -update`. DO NOT EDIT.\n#\n"
	return map[string][]byte{
		"kind/config/kube-scheduler.yaml": Config(marker+
			"# The local cluster's kube-scheduler (and the profiles gantry-provisioner\n"+
			"# simulates with): Gantry's profile as default-scheduler, and as\n"+
			"# gantry-best-effort, a second profile that MetadataPolicies can route pods\n"+
			"# to (e.g. BestEffort pods), which does not score\n"+
			"# NodeResourcesBalancedAllocation. Every profile that runs Reservation gives\n"+
			"# it the same args. `gantry-cluster --scheduler-config` takes another file.\n",
			LocalCluster()...),
		"config/overlays/full/kube-scheduler.yaml": Config(marker+
			"# The configuration of Gantry's kube-scheduler where it is the cluster's\n"+
			"# scheduler (config/overlays/full): Gantry's profile as default-scheduler,\n"+
			"# and as gantry-best-effort, without NodeResourcesBalancedAllocation\n"+
			"# scores. Run kube-scheduler with it; gantry-provisioner simulates with\n"+
			"# the same profiles (ConfigMap kube-scheduler-config). Replace both\n"+
			"# together, never one alone.\n",
			Cluster(v1.DefaultSchedulerName)...),
		"scheduler/config/second-scheduler/kube-scheduler.yaml": SecondSchedulerConfig(marker+
			"# Gantry's kube-scheduler beside the cluster's own (config/overlays/managed):\n"+
			"# Gantry's profile as gantry-scheduler, and as gantry-best-effort; only pods\n"+
			"# that name one of them are Gantry's. Its leader lease is its own\n"+
			"# (gantry-system/gantry-scheduler), so it never contends with the cluster's\n"+
			"# kube-scheduler. gantry-provisioner simulates with the same profiles.\n",
			Cluster(SecondSchedulerName)...),
		"scheduler/bench/testdata/gantry-scheduler-config.yaml": Config(marker+
			"# Gantry's profile for scheduler_perf: upstream's defaults plus every Gantry\n"+
			"# plugin, as Gantry's profile configures them.\n",
			SchedulerPerf()...),
	}
}

// Config renders a KubeSchedulerConfiguration of profiles, after header
// (comment lines).
func Config(header string, profiles ...configv1.KubeSchedulerProfile) []byte {
	return render(header, "", profiles)
}

// SecondSchedulerConfig is Config with leader election on the lease
// SecondSchedulerNamespace/SecondSchedulerName.
func SecondSchedulerConfig(header string, profiles ...configv1.KubeSchedulerProfile) []byte {
	return render(header, "leaderElection:\n  leaderElect: true\n  resourceLock: leases\n"+
		"  resourceName: "+SecondSchedulerName+"\n  resourceNamespace: "+SecondSchedulerNamespace+"\n", profiles)
}

func render(header, leaderElection string, profiles []configv1.KubeSchedulerProfile) []byte {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
	b.WriteString(leaderElection)
	b.WriteString("profiles:\n")
	for _, p := range profiles {
		b.WriteString("- schedulerName: " + scalar(ptr.Deref(p.SchedulerName, "")) + "\n")
		p.SchedulerName = nil
		b.WriteString(Body(p))
	}
	return []byte(b.String())
}

// Body renders a profile without its name, as the body of an item of a
// KubeSchedulerConfiguration's profiles list (indented two spaces): what
// follows "- schedulerName: <name>". It is what schedtest.StartScheduler
// takes. Extension points are written in upstream's order, multiPoint
// first; empty ones are left out.
func Body(p configv1.KubeSchedulerProfile) string {
	var b strings.Builder
	if p.SchedulerName != nil {
		b.WriteString("  schedulerName: " + scalar(*p.SchedulerName) + "\n")
	}
	if p.PercentageOfNodesToScore != nil {
		fmt.Fprintf(&b, "  percentageOfNodesToScore: %d\n", *p.PercentageOfNodesToScore)
	}
	if p.Plugins != nil {
		b.WriteString("  plugins:\n")
		v := reflect.ValueOf(*p.Plugins)
		var multiPoint string
		var rest strings.Builder
		for i := range v.NumField() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			set := pluginSet(name, v.Field(i).Interface().(configv1.PluginSet))
			if name == "multiPoint" {
				multiPoint = set
			} else {
				rest.WriteString(set)
			}
		}
		b.WriteString(multiPoint + rest.String())
	}
	if len(p.PluginConfig) > 0 {
		b.WriteString("  pluginConfig:\n")
		for _, pc := range p.PluginConfig {
			b.WriteString("  - name: " + scalar(pc.Name) + "\n")
			if len(pc.Args.Raw) == 0 {
				continue
			}
			args, err := yaml.JSONToYAML(pc.Args.Raw)
			if err != nil {
				panic(fmt.Sprintf("scheduler/profiles: args of %s: %v", pc.Name, err))
			}
			b.WriteString("    args:\n" + indent(string(args), "      "))
		}
	}
	return b.String()
}

// pluginSet renders an extension point's plugin set under "    name:", or
// "" when it is empty.
func pluginSet(name string, set configv1.PluginSet) string {
	if len(set.Enabled) == 0 && len(set.Disabled) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("    " + name + ":\n")
	for _, list := range []struct {
		name    string
		plugins []configv1.Plugin
	}{{"enabled", set.Enabled}, {"disabled", set.Disabled}} {
		if len(list.plugins) == 0 {
			continue
		}
		b.WriteString("      " + list.name + ":\n")
		for _, p := range list.plugins {
			b.WriteString("      - name: " + scalar(p.Name) + "\n")
			if p.Weight != nil {
				fmt.Fprintf(&b, "        weight: %d\n", *p.Weight)
			}
		}
	}
	return b.String()
}

var plain = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]*$`)

// notPlain are the words YAML 1.1 reads as booleans or null.
var notPlain = map[string]bool{"y": true, "n": true, "yes": true, "no": true, "on": true, "off": true,
	"true": true, "false": true, "null": true}

// scalar writes s as a YAML string: plain when that reads back as the
// same string, double-quoted otherwise (e.g. "*").
func scalar(s string) string {
	if plain.MatchString(s) && !notPlain[strings.ToLower(s)] {
		return s
	}
	return strconv.Quote(s)
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" && l != "\n" {
			b.WriteString(prefix)
		}
		b.WriteString(l)
	}
	return b.String()
}
