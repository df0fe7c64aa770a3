package reservation

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// newScheduler builds a scheduler with profiles (the profiles section of a
// KubeSchedulerConfiguration file, decoded as kube-scheduler decodes it),
// the plugin registered through the extension layer as in Gantry's
// kube-scheduler, and returns the error building it gave.
func newScheduler(t *testing.T, profiles string) error {
	t.Helper()
	_, err := newExtendedScheduler(t, profiles)
	return err
}

// newExtendedScheduler is newScheduler that also returns the scheduler's
// extension layer.
func newExtendedScheduler(t *testing.T, profiles string) (*frameworkext.Extender, error) {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(
		"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n"+profiles), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := obj.(*schedconfig.KubeSchedulerConfiguration)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	ext := frameworkext.New()
	_, err = scheduler.New(ctx, client, informers.NewSharedInformerFactory(client, 0), nil,
		profile.NewRecorderFactory(events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})),
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithKubeConfig(&rest.Config{Host: "https://127.0.0.1:1"}),
		scheduler.WithFrameworkOutOfTreeRegistry(frameworkruntime.Registry{Name: ext.PluginFactoryProxy(Name, New)}))
	return ext, err
}

// profileWith is a profile named name that runs the plugin, with args (a
// YAML mapping), or none.
func profileWith(name, args string) string {
	p := "- schedulerName: " + name + `
  plugins:
    multiPoint:
      enabled:
      - name: Reservation
`
	if args != "" {
		p += "  pluginConfig:\n  - name: Reservation\n    args: " + args + "\n"
	}
	return p
}

// One store serves every profile, with one set of args: two profiles that
// configure the plugin differently are an error that names both, not a
// configuration in which the first silently wins.
func TestProfilesMustAgreeOnArgs(t *testing.T) {
	for name, tc := range map[string]struct {
		profiles string
		wantErr  bool
	}{
		"different args": {
			profiles: profileWith("first", "{terminalReservationTTL: 1m}") + profileWith("second", "{terminalReservationTTL: 5m}"),
			wantErr:  true,
		},
		"args in one profile only, other than the defaults": {
			profiles: profileWith("first", "{terminalReservationTTL: 2m}") + profileWith("second", ""),
			wantErr:  true,
		},
		"the same args in both profiles": {
			profiles: profileWith("first", "{terminalReservationTTL: 2m}") + profileWith("second", "{terminalReservationTTL: 120s}"),
		},
		"the defaults in one profile, written out in the other": {
			profiles: profileWith("first", "") + profileWith("second", "{terminalReservationTTL: 10m}"),
		},
		"no args in either profile": {
			profiles: profileWith("first", "") + profileWith("second", ""),
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := newScheduler(t, tc.profiles)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("building the scheduler: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("profiles with different Reservation args were accepted")
			}
			for _, want := range []string{`"first"`, `"second"`, Name} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
}

// The plugin provides its store to the other plugins of its scheduler
// (AsyncPreemption) through the contract package, once for all profiles.
func TestNewProvidesTheStore(t *testing.T) {
	ext, err := newExtendedScheduler(t, profileWith("first", "")+profileWith("second", ""))
	if err != nil {
		t.Fatalf("building the scheduler: %v", err)
	}
	sh, ok := sharedKey.Lookup(ext)
	if !ok || sh.store == nil {
		t.Fatal("no store shared by the plugin's instances")
	}
	if p := reservepod.ProviderOf(ext); p != reservepod.Provider(sh.store) {
		t.Errorf("the scheduler's reservepod.Provider is %v, want the plugin's store", p)
	}
}
