package scheme

import (
	"strings"
	"testing"
	"time"

	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/scheduler/apis/config"
	"github.com/gantry-dev/gantry/scheduler/profiles"
)

// profile is a configuration file of Gantry's profile (scheduler/profiles),
// named gantry, up to its pluginConfig.
var profile = func() string {
	p := profiles.Gantry()
	p.SchedulerName = ptr.To("gantry")
	return string(profiles.Config("", p)) + "  pluginConfig:\n"
}()

// decode loads a configuration file as kube-scheduler does (its scheme's
// strict universal decoder: defaulting, then conversion to internal).
func decode(t *testing.T, pluginConfig string) (*schedconfig.KubeSchedulerConfiguration, error) {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(profile+pluginConfig), nil, nil)
	if err != nil {
		return nil, err
	}
	return obj.(*schedconfig.KubeSchedulerConfiguration), nil
}

func argsOf(t *testing.T, cfg *schedconfig.KubeSchedulerConfiguration, name string) any {
	t.Helper()
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == name {
			return pc.Args
		}
	}
	t.Fatalf("no pluginConfig for %s", name)
	return nil
}

func TestConfigurationFileGivesTypedDefaultedArgs(t *testing.T) {
	cfg, err := decode(t, `  - name: AsyncPreemption
    args:
      maxConcurrentDeletes: 3
`)
	if err != nil {
		t.Fatal(err)
	}
	ap, ok := argsOf(t, cfg, "AsyncPreemption").(*config.AsyncPreemptionArgs)
	if !ok {
		t.Fatalf("AsyncPreemption args are %T, want *config.AsyncPreemptionArgs", argsOf(t, cfg, "AsyncPreemption"))
	}
	if ap.MaxConcurrentDeletes != 3 || ap.PreemptionTimeout.Duration != 30*time.Second || ap.MinCandidateNodesAbsolute != 100 {
		t.Errorf("AsyncPreemption args %+v: want maxConcurrentDeletes 3 and the other fields defaulted", ap)
	}
	// No pluginConfig for Reservation: kube-scheduler adds its defaults.
	r, ok := argsOf(t, cfg, "Reservation").(*config.ReservationArgs)
	if !ok {
		t.Fatalf("Reservation args are %T, want *config.ReservationArgs", argsOf(t, cfg, "Reservation"))
	}
	if r.TerminalReservationTTL.Duration != 10*time.Minute {
		t.Errorf("Reservation args %+v: want the 10m default", r)
	}
}

func TestConfigurationFileRejectsUnknownArgsFields(t *testing.T) {
	_, err := decode(t, `  - name: Reservation
    args:
      terminalReservationTTl: 1m
`)
	if err == nil || !strings.Contains(err.Error(), `unknown field "terminalReservationTTl"`) {
		t.Fatalf("error %v, want the unknown field named", err)
	}
}
