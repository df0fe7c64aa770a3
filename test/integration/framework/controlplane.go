// Package framework starts etcd and Gantry's kube-apiserver from the build
// output as plain local processes, for integration tests: real API
// semantics (validation, admission, storage) without a scheduler, nodes or a
// cluster program. Each test gets its own processes, ports and data, removed
// when it ends; their logs are printed when it fails.
package framework

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Config authenticates as a cluster admin.
	Config *rest.Config
	Client kubernetes.Interface
	dir    string
}

const adminToken = "gantry-integration-admin"

// Start runs etcd and kube-apiserver from <repo>/_output/bin (`make build`),
// with extra kube-apiserver flags, and waits until the apiserver is ready.
func Start(t testing.TB, apiserverArgs ...string) *ControlPlane {
	t.Helper()
	root, err := cluster.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "_output", "bin")
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s not built: run `make build` first (%v)", b, err)
		}
	}
	cp := &ControlPlane{dir: t.TempDir()}
	etcdClient, etcdPeer, securePort := freePort(t), freePort(t), freePort(t)
	cp.run(t, filepath.Join(bin, "etcd"), "etcd",
		"--name=integration", "--data-dir="+filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls="+localURL(etcdClient), "--advertise-client-urls="+localURL(etcdClient),
		"--listen-peer-urls="+localURL(etcdPeer), "--initial-advertise-peer-urls="+localURL(etcdPeer),
		"--initial-cluster=integration="+localURL(etcdPeer),
		"--log-level=warn")

	keyFile := filepath.Join(cp.dir, "sa.key")
	writeServiceAccountKey(t, keyFile)
	tokens := filepath.Join(cp.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--etcd-servers=" + localURL(etcdClient),
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(securePort),
		"--cert-dir=" + filepath.Join(cp.dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + keyFile, "--service-account-signing-key-file=" + keyFile,
		"--token-auth-file=" + tokens, "--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		// Without kube-controller-manager no namespace gets a default
		// service account for this plugin to find.
		"--disable-admission-plugins=ServiceAccount",
	}, apiserverArgs...)
	cp.run(t, filepath.Join(bin, "kube-apiserver"), "kube-apiserver", args...)

	cp.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + strconv.Itoa(securePort),
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, // self-signed serving cert of a loopback test server
		QPS:             100, Burst: 200,
	}
	cp.Client = kubernetes.NewForConfigOrDie(cp.Config)
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		body, err := cp.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		t.Fatalf("kube-apiserver not ready within 90s:\n%s", cp.logTail("kube-apiserver", 30))
	}
	return cp
}

func localURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// run starts a process that is stopped when the test ends; a process that
// exits early fails the test with its log.
func (cp *ControlPlane) run(t testing.TB, binary, name string, args ...string) {
	t.Helper()
	logFile, err := os.Create(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = logFile.Close()
		if t.Failed() {
			t.Logf("last lines of the %s log:\n%s", name, cp.logTail(name, 20))
		}
	})
}

func (cp *ControlPlane) logTail(name string, lines int) string {
	data, err := os.ReadFile(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "    " + strings.Join(all, "\n    ")
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeServiceAccountKey(t testing.TB, path string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Dir is the control plane's scratch directory (logs, data).
func (cp *ControlPlane) Dir() string { return cp.dir }
