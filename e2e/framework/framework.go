package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
)

// Framework gives each spec of a Describe its own namespace, deleted after the
// spec, and dumps that namespace's objects when the spec fails.
type Framework struct {
	// BaseName prefixes the namespaces.
	BaseName string
	// Namespace is the current spec's namespace.
	Namespace string
	// Client is the admin clientset.
	Client kubernetes.Interface
	// Gantry is the admin clientset of Gantry's API groups.
	Gantry gantryclient.Interface
}

// NewFramework registers the per-spec setup and teardown. Call it in the body
// of a Describe.
func NewFramework(baseName string) *Framework {
	f := &Framework{BaseName: baseName}
	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		f.Client = TestContext.Client
		var err error
		f.Gantry, err = GantryClient()
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "making the Gantry clientset")
		ns, err := f.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "e2e-" + baseName + "-",
				Labels:       map[string]string{"e2e.gantry.dev/suite": baseName},
			},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating the spec's namespace")
		f.Namespace = ns.Name
		ginkgo.DeferCleanup(f.teardown)
		WaitForDefaultServiceAccount(ctx, f.Client, f.Namespace)
	})
	return f
}

func (f *Framework) teardown(ctx ginkgo.SpecContext) {
	if ginkgo.CurrentSpecReport().Failed() {
		dir := SpecArtifacts()
		if err := DumpNamespace(ctx, f.Client, f.Namespace, dir); err != nil {
			ginkgo.GinkgoWriter.Printf("dumping namespace %s: %v\n", f.Namespace, err)
		} else {
			ginkgo.GinkgoWriter.Printf("objects of namespace %s written to %s\n", f.Namespace, dir)
		}
	}
	err := f.Client.CoreV1().Namespaces().Delete(ctx, f.Namespace, metav1.DeleteOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting namespace %s", f.Namespace)
}

// WaitForDefaultServiceAccount waits until kube-controller-manager has made
// the default ServiceAccount of the new namespace ns. Until it has, the
// ServiceAccount admission plugin refuses every pod that names no
// ServiceAccount of its own ("error looking up service account").
func WaitForDefaultServiceAccount(ctx context.Context, c kubernetes.Interface, ns string) {
	Eventually(ctx, func() error {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	}).Should(gomega.Succeed(), "the default ServiceAccount of namespace %s", ns)
}

// SpecArtifacts is the directory where the current spec's failure artifacts
// go (the namespace dump, and whatever else a suite writes there).
func SpecArtifacts() string {
	return filepath.Join(TestContext.Artifacts, sanitize(ginkgo.CurrentSpecReport().FullText()))
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func sanitize(s string) string {
	s = unsafe.ReplaceAllString(s, "_")
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// DumpNamespace writes the workloads, pods and events of ns, and the nodes,
// as JSON files into dir.
func DumpNamespace(ctx context.Context, c kubernetes.Interface, ns, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	lists := map[string]func() (runtime.Object, error){
		"pods.json":        func() (runtime.Object, error) { return c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}) },
		"events.json":      func() (runtime.Object, error) { return c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}) },
		"deployments.json": func() (runtime.Object, error) { return c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}) },
		"replicasets.json": func() (runtime.Object, error) { return c.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{}) },
		"nodes.json":       func() (runtime.Object, error) { return c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}) },
	}
	var firstErr error
	for file, list := range lists {
		obj, err := list()
		if err == nil {
			var data []byte
			if data, err = json.MarshalIndent(obj, "", "  "); err == nil {
				err = os.WriteFile(filepath.Join(dir, file), data, 0o644)
			}
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", file, err)
		}
	}
	return firstErr
}

// DeletePods deletes every pod of the spec's namespace at once (no grace
// period) and waits until they are gone, so the next spec starts on an
// empty cluster.
func (f *Framework) DeletePods(ctx context.Context) {
	Eventually(ctx, func(g gomega.Gomega) {
		pods := f.Client.CoreV1().Pods(f.Namespace)
		zero := int64(0)
		g.Expect(pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})).To(gomega.Succeed())
		list, err := pods.List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(list.Items).To(gomega.BeEmpty())
	}).Should(gomega.Succeed(), "deleting the spec's pods")
}

// WriteSpecArtifactJSON writes v as indented JSON into file of the current
// spec's artifacts; a failure is reported, not fatal.
func WriteSpecArtifactJSON(file string, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		ginkgo.GinkgoWriter.Printf("writing artifact %s: %v\n", file, err)
		return
	}
	WriteSpecArtifact(file, data)
}

// WriteSpecArtifact writes data as file into the current spec's artifacts;
// a failure to write is reported, not fatal.
func WriteSpecArtifact(file string, data []byte) {
	dir := SpecArtifacts()
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, file), data, 0o644)
	}
	if err != nil {
		ginkgo.GinkgoWriter.Printf("writing artifact %s: %v\n", file, err)
	}
}

// WriteJSON writes v as indented JSON to file; a failure is reported, not
// fatal.
func WriteJSON(file string, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		err = os.WriteFile(file, data, 0o644)
	}
	if err != nil {
		ginkgo.GinkgoWriter.Printf("writing %s: %v\n", file, err)
	}
}
