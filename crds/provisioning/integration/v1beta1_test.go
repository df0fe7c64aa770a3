//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/crds/install"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

const crdName = "provisioningrequests." + provv1.GroupName

var (
	v1Resource      = provv1.SchemeGroupVersion.WithResource("provisioningrequests")
	v1beta1Resource = schema.GroupVersionResource{Group: provv1.GroupName, Version: "v1beta1", Resource: "provisioningrequests"}
)

// TestUpgradeFromV1beta1Storage: Gantry's ProvisioningRequest CRD applies
// over one that stored autoscaling.x-k8s.io/v1beta1, as cluster-autoscaler's
// did, and both versions then serve the same requests.
//
// The CRD installed first is Gantry's own with v1beta1 as its only, and
// storage, version: cluster-autoscaler's CRD was exactly that before v1 came
// (up to 1.30), so the requests of such a cluster are stored as v1beta1 and
// status.storedVersions holds v1beta1 from then on; a cluster that later
// applied upstream's v1+v1beta1 CRD holds [v1beta1 v1], the state this test
// reaches after the apply. The schema is Gantry's: the API server checks
// spec.versions against status.storedVersions whatever the schema.
//
// Before Gantry's CRD served v1beta1 the apply was refused; the test shows
// that too, with the v1-only CRD Gantry shipped then. It ends with the
// storage migration crds/README.md describes, after which a CRD without
// v1beta1 is accepted.
func TestUpgradeFromV1beta1Storage(t *testing.T) {
	ctx := context.Background()
	gantryCRD, manifests := generatedCRD(t)
	v1, v1beta1 := version(t, gantryCRD, "v1"), version(t, gantryCRD, "v1beta1")
	if !v1.Served || !v1.Storage || !v1beta1.Served || v1beta1.Storage || !v1beta1.Deprecated ||
		v1beta1.DeprecationWarning == nil || !strings.Contains(*v1beta1.DeprecationWarning, "use autoscaling.x-k8s.io/v1") {
		t.Fatalf("generated CRD: want v1 served and stored, v1beta1 served, not stored, deprecated with a warning naming v1; got %+v", gantryCRD.Spec.Versions)
	}
	if diff := cmp.Diff(v1.Schema, v1beta1.Schema); diff != "" {
		t.Errorf("v1beta1's schema differs from v1's (-v1 +v1beta1):\n%s", diff)
	}
	if !cmp.Equal(v1.Subresources, v1beta1.Subresources) || !cmp.Equal(v1.AdditionalPrinterColumns, v1beta1.AdditionalPrinterColumns) {
		t.Errorf("v1beta1's subresources or printer columns differ from v1's: %+v, %+v", v1beta1.Subresources, v1beta1.AdditionalPrinterColumns)
	}

	cp := framework.Start(t)
	ext, err := apiextensionsclient.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	warned := &util.Warnings{}
	cfg := rest.CopyConfig(cp.Config)
	cfg.WarningHandler = warned
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	storedVersions := func(want ...string) {
		t.Helper()
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(crd.Status.StoredVersions, want) {
			t.Fatalf("status.storedVersions %v, want %v", crd.Status.StoredVersions, want)
		}
	}

	// The cluster as an old cluster-autoscaler install left it.
	old := gantryCRD.DeepCopy()
	stored := v1beta1.DeepCopy()
	stored.Storage, stored.Deprecated, stored.DeprecationWarning = true, false, nil
	old.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{*stored}
	cp.InstallCRDs(t, old)
	storedVersions("v1beta1")
	specs := map[string]any{}
	for i, r := range []*provv1.ProvisioningRequest{
		request("check"),
		wrappers.MakeProvisioningRequest("atomic", "default", provv1.ClassBestEffortAtomicScaleUp).
			PodSet("workers", 8).PodSet("leader", 1).Parameter(provv1.ParameterNoRetry, "true").Obj(),
		wrappers.MakeProvisioningRequest("bare", "default", provv1.ClassCheckCapacity).PodSet("workers", 1).Obj(),
	} {
		u, err := dyn.Resource(v1beta1Resource).Namespace("default").Create(ctx, toUnstructured(t, r, "v1beta1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("request %d through v1beta1: %v", i, err)
		}
		specs[r.Name] = u.Object["spec"] // as stored: without the nulls sent
	}
	util.Must(t).Until(ctx, util.Timeout, "the v1beta1 requests listed", func(ctx context.Context) bool {
		list, err := dyn.Resource(v1beta1Resource).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == len(specs)
	})
	storedVersions("v1beta1")

	// The CRD Gantry shipped before, serving v1 only, is refused.
	v1Only := gantryCRD.DeepCopy()
	v1Only.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{*v1}
	_, err = install.Install(ctx, cp.Config, writeCRD(t, v1Only), util.Timeout)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `status.storedVersions[0]: Invalid value: "v1beta1": missing from spec.versions`) {
		t.Fatalf("applying a CRD without v1beta1 over stored v1beta1: want it refused (422, v1beta1 missing from spec.versions), got %v", err)
	}
	t.Logf("a CRD without v1beta1 is refused: %v", err)

	// Gantry's CRD is applied as `make up` and `kubectl apply --server-side` do.
	if _, err := install.Install(ctx, cp.Config, manifests, util.Timeout); err != nil {
		t.Fatalf("applying Gantry's CRDs over stored v1beta1: %v", err)
	}
	storedVersions("v1beta1", "v1")
	util.Must(t).Until(ctx, util.Timeout, "v1 served", func(ctx context.Context) bool {
		_, err := dyn.Resource(v1Resource).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil
	})

	// Every request reads the same through both versions.
	get := func(res schema.GroupVersionResource, name string) *unstructured.Unstructured {
		t.Helper()
		u, err := dyn.Resource(res).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s through %s: %v", name, res.Version, err)
		}
		if want := provv1.GroupName + "/" + res.Version; u.GetAPIVersion() != want {
			t.Errorf("%s read through %s as %s", name, res.Version, u.GetAPIVersion())
		}
		return u
	}
	same := func(name string) {
		t.Helper()
		for _, res := range []schema.GroupVersionResource{v1Resource, v1beta1Resource} {
			if diff := cmp.Diff(specs[name], get(res, name).Object["spec"]); diff != "" {
				t.Errorf("%s through %s: spec differs from the one created (-created +read):\n%s", name, res.Version, diff)
			}
		}
	}
	for name := range specs {
		same(name)
	}
	created, err := dyn.Resource(v1Resource).Namespace("default").Create(ctx, toUnstructured(t, request("new"), "v1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request through v1: %v", err)
	}
	specs[created.GetName()] = created.Object["spec"]
	same(created.GetName())

	// v1beta1 warns, v1 does not.
	warned.Take()
	get(v1beta1Resource, "new")
	if got, want := warned.Take(), []string{*v1beta1.DeprecationWarning}; !slices.Equal(got, want) {
		t.Errorf("warnings of a v1beta1 read: %q, want %q", got, want)
	}
	get(v1Resource, "new")
	if got := warned.Take(); len(got) != 0 {
		t.Errorf("warnings of a v1 read: %q, want none", got)
	}

	// v1's validation rules hold through v1beta1.
	r := get(v1beta1Resource, "atomic")
	if err := unstructured.SetNestedField(r.Object, "check-capacity.autoscaling.x-k8s.io", "spec", "provisioningClassName"); err != nil {
		t.Fatal(err)
	}
	_, err = dyn.Resource(v1beta1Resource).Namespace("default").Update(ctx, r, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.provisioningClassName: Invalid value") ||
		!strings.Contains(err.Error(), "Value is immutable") {
		t.Errorf("changing the class through v1beta1: want it refused as immutable, got %v", err)
	}

	// The storage migration of crds/README.md: every request written again
	// through v1 (stored as v1 now), then v1beta1 removed from
	// status.storedVersions. A CRD without v1beta1 is accepted from then on.
	list, err := dyn.Resource(v1Resource).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if _, err := dyn.Resource(v1Resource).Namespace(list.Items[i].GetNamespace()).Update(ctx, &list.Items[i], metav1.UpdateOptions{}); err != nil {
			t.Fatalf("rewriting %s through v1: %v", list.Items[i].GetName(), err)
		}
	}
	patch := []byte(`{"status":{"storedVersions":["v1"]}}`)
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, crdName, types.MergePatchType, patch,
		metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := install.Install(ctx, cp.Config, writeCRD(t, v1Only), util.Timeout); err != nil {
		t.Fatalf("applying a CRD without v1beta1 after the migration: %v", err)
	}
	storedVersions("v1")
	for name, spec := range specs {
		if diff := cmp.Diff(spec, get(v1Resource, name).Object["spec"]); diff != "" {
			t.Errorf("%s after the migration: spec differs (-created +read):\n%s", name, diff)
		}
	}
}

// generatedCRD returns Gantry's ProvisioningRequest CRD as crds/manifests
// holds it, and that directory.
func generatedCRD(t *testing.T) (*apiextensionsv1.CustomResourceDefinition, string) {
	t.Helper()
	dir := filepath.Join(framework.Root(t), "crds", "manifests")
	list, err := install.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range list {
		if crd.Name == crdName {
			return crd, dir
		}
	}
	t.Fatalf("no CRD %s in %s", crdName, dir)
	return nil, ""
}

func version(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
	t.Helper()
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == name {
			return &crd.Spec.Versions[i]
		}
	}
	t.Fatalf("CRD %s has no version %s", crd.Name, name)
	return nil
}

// writeCRD writes crd to a directory of its own, for install.Install.
func writeCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) string {
	t.Helper()
	crd = crd.DeepCopy()
	crd.TypeMeta = metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"}
	data, err := yaml.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// toUnstructured is r as a request of version, for the dynamic client: the
// two versions share one schema.
func toUnstructured(t *testing.T, r *provv1.ProvisioningRequest, version string) *unstructured.Unstructured {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(fmt.Sprintf("%s/%s", provv1.GroupName, version))
	u.SetKind("ProvisioningRequest")
	delete(u.Object, "status")
	return u
}
