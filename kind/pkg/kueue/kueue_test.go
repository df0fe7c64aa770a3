package kueue

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestRender(t *testing.T) {
	objs, err := Render(t.TempDir(), Module{Dir: filepath.Join("testdata", "module"), Version: "v0.0.0"}, "gantry.local/kueue:v0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
		if o.GetKind() == "APIService" {
			t.Errorf("the visibility APIService was kept")
		}
	}
	if len(kinds) < 2 || kinds[0] != "Namespace" || kinds[1] != "CustomResourceDefinition" {
		t.Errorf("objects in order %v, want the Namespace, then the CRDs first", kinds)
	}

	hooks := find(objs, "MutatingWebhookConfiguration", "kueue-mutating-webhook-configuration")
	if hooks == nil {
		t.Fatal("no mutating webhook configuration")
	}
	list, _, _ := unstructured.NestedSlice(hooks.Object, "webhooks")
	var names []string
	for _, h := range list {
		names = append(names, h.(map[string]any)["name"].(string))
	}
	if len(names) != 2 || names[0] != "mjob.kb.io" || names[1] != "mworkload.kb.io" {
		t.Errorf("webhooks kept %v, want [mjob.kb.io mworkload.kb.io]", names)
	}

	cfg, err := Config(find(objs, "ConfigMap", ConfigMap))
	if err != nil {
		t.Fatal(err)
	}
	frameworks, _, _ := unstructured.NestedStringSlice(cfg, "integrations", "frameworks")
	if len(frameworks) != 1 || frameworks[0] != "batch/job" {
		t.Errorf("frameworks %v, want [batch/job]", frameworks)
	}
	if port, _, _ := unstructured.NestedFieldNoCopy(cfg, "webhook", "port"); port != float64(9443) {
		t.Errorf("the rest of the configuration was not kept: webhook.port %v", port)
	}

	d := find(objs, "Deployment", Deployment)
	c := d.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if c["image"] != "gantry.local/kueue:v0.0.0" || c["imagePullPolicy"] != "IfNotPresent" {
		t.Errorf("manager image %v, pull policy %v", c["image"], c["imagePullPolicy"])
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if len(args) != 2 || args[1] != "--feature-gates="+FeatureGates {
		t.Errorf("manager args %v", args)
	}

	name, err := WebhookPortName(objs)
	if err != nil || name != "" {
		t.Errorf("WebhookPortName = %q, %v; want the unnamed port", name, err)
	}
}

func TestRenderRefusesAnotherLayout(t *testing.T) {
	if _, err := Render(t.TempDir(), Module{Dir: t.TempDir(), Version: "v0.0.0"}, ""); err == nil {
		t.Error("Render of a module without config/default succeeded")
	}
}
