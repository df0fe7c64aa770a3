package app

import (
	"io"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/admission"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

func noopFactory(io.Reader) (admission.Interface, error) {
	return admission.NewHandler(admission.Create), nil
}

func TestWithAdmissionPlugin(t *testing.T) {
	s := options.NewServerRunOptions()
	err := WithAdmissionPlugin(AdmissionPlugin{Name: "GantryTest", Factory: noopFactory, Before: "MutatingAdmissionWebhook"})(s)
	if err != nil {
		t.Fatal(err)
	}
	generic := s.Admission.GenericAdmission
	if !slices.Contains(generic.Plugins.Registered(), "GantryTest") {
		t.Fatalf("plugin not registered: %v", generic.Plugins.Registered())
	}
	order := generic.RecommendedPluginOrder
	at, webhook := slices.Index(order, "GantryTest"), slices.Index(order, "MutatingAdmissionWebhook")
	if at < 0 || at != webhook-1 {
		t.Errorf("GantryTest at %d, MutatingAdmissionWebhook at %d in %v; want it just before", at, webhook, order)
	}
	if generic.DefaultOffPlugins.Has("GantryTest") {
		t.Errorf("plugin is off by default")
	}

	if err := WithAdmissionPlugin(AdmissionPlugin{Name: "GantryTest", Factory: noopFactory})(s); err == nil ||
		!strings.Contains(err.Error(), "already registered") {
		t.Errorf("registering twice: err = %v", err)
	}
}

func TestWithAdmissionPluginErrors(t *testing.T) {
	for name, p := range map[string]AdmissionPlugin{
		"no name":       {Factory: noopFactory},
		"no factory":    {Name: "X"},
		"unknown order": {Name: "X", Factory: noopFactory, Before: "NoSuchPlugin"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := WithAdmissionPlugin(p)(options.NewServerRunOptions()); err == nil {
				t.Errorf("want an error")
			}
		})
	}
}

func TestDefaultOffPlugin(t *testing.T) {
	s := options.NewServerRunOptions()
	if err := WithAdmissionPlugin(AdmissionPlugin{Name: "GantryOff", Factory: noopFactory, DefaultOff: true})(s); err != nil {
		t.Fatal(err)
	}
	if !s.Admission.GenericAdmission.DefaultOffPlugins.Has("GantryOff") {
		t.Errorf("DefaultOff plugin is on by default")
	}
	if last := s.Admission.GenericAdmission.RecommendedPluginOrder; last[len(last)-1] != "GantryOff" {
		t.Errorf("plugin without Before not appended: %v", last)
	}
}

func TestCommandBuilds(t *testing.T) {
	cmd, err := NewAPIServerCommand(WithAdmissionPlugin(AdmissionPlugin{Name: "GantryTest", Factory: noopFactory}))
	if err != nil {
		t.Fatal(err)
	}
	f := cmd.Flags().Lookup("enable-admission-plugins")
	if f == nil || !strings.Contains(f.Usage, "GantryTest") {
		t.Errorf("--enable-admission-plugins does not list the Gantry plugin")
	}
}
