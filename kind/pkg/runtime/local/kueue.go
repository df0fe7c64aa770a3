package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
)

// Kueue's manager runs as a process beside kwokctl's, started and stopped
// by this runtime (kwokctl starts its components when it creates the
// cluster, before Kueue's CRDs exist). Its pid file and log are where
// kwokctl keeps its components', so that State, LogTail and
// RestartComponent treat it as one of them; its configuration is
// <cluster>/kueue/config.yaml, whose presence says the cluster has Kueue.
//
// Its webhooks are reached as on any cluster, through the Service Kueue's
// manifests make and Kueue's own certificate for that Service's DNS name:
// kube-apiserver routes to Services through their EndpointSlices
// (--enable-aggregator-routing, which Create sets, since a local cluster has
// no Service network), and the runtime gives the Service one EndpointSlice
// with this host's address and the port the manager listens on.

var _ cluster.KueueRunner = &Runtime{}

func (r *Runtime) kueueDir() string { return filepath.Join(r.clusterDir(), "kueue") }

func (r *Runtime) kueueConfig() string { return filepath.Join(r.kueueDir(), "config.yaml") }

// hasKueue reports whether Kueue was installed into the cluster.
func (r *Runtime) hasKueue() bool {
	_, err := os.Stat(r.kueueConfig())
	return err == nil
}

// RunKueue implements cluster.KueueRunner.
func (r *Runtime) RunKueue(ctx context.Context, cfg *rest.Config, m kueue.Module) (string, error) {
	if _, err := os.Stat(r.bin(kueue.Component)); err != nil {
		return "", fmt.Errorf("no Kueue manager in %s: run `make kueue` first", r.o.BinDir)
	}
	objs, err := kueue.Render(r.o.WorkDir, m, "")
	if err != nil {
		return "", err
	}
	var cm *unstructured.Unstructured
	kept := objs[:0]
	for _, o := range objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == kueue.Deployment:
			continue
		case o.GetKind() == "ConfigMap" && o.GetName() == kueue.ConfigMap:
			cm = o
		}
		kept = append(kept, o)
	}
	objs = kept
	portName, err := kueue.WebhookPortName(objs)
	if err != nil {
		return "", err
	}
	settings, err := r.kueueSettings()
	if err != nil {
		return "", err
	}
	objs = append(objs, webhookEndpoints(portName, settings))
	if err := kueue.Apply(ctx, cfg, objs, r.o.Timeout); err != nil {
		return "", err
	}
	if err := r.writeKueueConfig(cm, settings); err != nil {
		return "", err
	}
	how := "already running"
	if !alive(r.pidFile(kueue.Component)) {
		if err := r.startKueue(); err != nil {
			return "", err
		}
		how = "manager started"
	}
	// Again on every up: a certificate Kueue renewed since reaches the
	// manager, which reloads changed files.
	if err := r.mountKueueCerts(ctx, cfg); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s, webhooks on %s", how, settings.webhookAddress()), nil
}

// mountKueueCerts does for the local manager what the kubelet does for
// Kueue's pod, which mounts the Secret of its webhook certificate: it waits
// for Kueue to write the Secret and copies its keys into the certificate
// directory, where Kueue waits for them before it serves. A manager
// restarted later finds them there. Kueue's serving certificate is valid
// for a year and renewed 90 days before it ends (cert-controller's
// defaults); `up` copies it again, so a cluster that lives that long gets
// the renewed one with `make up KUEUE=1`.
func (r *Runtime) mountKueueCerts(ctx context.Context, cfg *rest.Config) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var secret *v1.Secret
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, r.o.Timeout, true, func(ctx context.Context) (bool, error) {
		if !alive(r.pidFile(kueue.Component)) {
			return false, errors.New("Kueue's manager exited")
		}
		secret, err = client.CoreV1().Secrets(kueue.Namespace).Get(ctx, kueue.CertSecret, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return len(secret.Data["tls.crt"]) > 0 && len(secret.Data["tls.key"]) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Kueue's certificate Secret %s/%s: %w", kueue.Namespace, kueue.CertSecret, err)
	}
	dir := filepath.Join(r.kueueDir(), "certs")
	for key, data := range secret.Data {
		if key != filepath.Base(key) || strings.HasPrefix(key, ".") {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, key), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// kueueSettings are where the local manager listens.
type kueueSettings struct {
	host                    string
	webhookPort, healthPort int
}

func (s kueueSettings) webhookAddress() string {
	return net.JoinHostPort(s.host, strconv.Itoa(s.webhookPort))
}

// kueueSettings are those of the cluster's Kueue when it has one, else
// this host's address and two free ports.
func (r *Runtime) kueueSettings() (kueueSettings, error) {
	if data, err := os.ReadFile(r.kueueConfig()); err == nil {
		var c struct {
			Webhook struct {
				Host string `json:"host"`
				Port int    `json:"port"`
			} `json:"webhook"`
			Health struct {
				Address string `json:"healthProbeBindAddress"`
			} `json:"health"`
		}
		if err := yaml.Unmarshal(data, &c); err != nil {
			return kueueSettings{}, fmt.Errorf("%s: %w", r.kueueConfig(), err)
		}
		_, hp, _ := net.SplitHostPort(c.Health.Address)
		health, _ := strconv.Atoi(hp)
		if c.Webhook.Host != "" && c.Webhook.Port > 0 && health > 0 {
			return kueueSettings{host: c.Webhook.Host, webhookPort: c.Webhook.Port, healthPort: health}, nil
		}
	}
	host, err := hostAddress()
	if err != nil {
		return kueueSettings{}, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return kueueSettings{}, err
	}
	return kueueSettings{host: host, webhookPort: ports[0], healthPort: ports[1]}, nil
}

// hostAddress is an address of this host that an EndpointSlice may hold:
// kube-apiserver refuses loopback and link-local ones there. It is the
// first global unicast IPv4 address of an interface that is up.
func hostAddress() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("this host has no non-loopback IPv4 address for Kueue's webhooks (kube-apiserver reaches them through an EndpointSlice, which may not hold a loopback address)")
}

// freePorts returns n TCP ports free on every address at the time of the call.
func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// webhookEndpoints is the EndpointSlice that sends WebhookService's
// traffic to the local manager.
func webhookEndpoints(portName string, s kueueSettings) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{
			"name": kueue.WebhookService + "-local", "namespace": kueue.Namespace,
			"labels": map[string]any{
				"kubernetes.io/service-name":             kueue.WebhookService,
				"endpointslice.kubernetes.io/managed-by": kueue.FieldManager,
			},
		},
		"addressType": "IPv4",
		"ports":       []any{map[string]any{"name": portName, "port": int64(s.webhookPort), "protocol": "TCP"}},
		"endpoints": []any{map[string]any{
			"addresses":  []any{s.host},
			"conditions": map[string]any{"ready": true},
		}},
	}}
}

// writeKueueConfig writes the manager's configuration: Kueue's, from its
// ConfigMap, listening on the settings' host and ports, its certificates
// in the cluster's directory, its metrics off.
func (r *Runtime) writeKueueConfig(cm *unstructured.Unstructured, s kueueSettings) error {
	if cm == nil {
		return fmt.Errorf("ConfigMap %s is not among Kueue's manifests", kueue.ConfigMap)
	}
	cfg, err := kueue.Config(cm)
	if err != nil {
		return err
	}
	set := func(v any, path ...string) {
		if err == nil {
			err = unstructured.SetNestedField(cfg, v, path...)
		}
	}
	set(s.host, "webhook", "host")
	set(int64(s.webhookPort), "webhook", "port")
	set(filepath.Join(r.kueueDir(), "certs"), "webhook", "certDir")
	set(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.healthPort)), "health", "healthProbeBindAddress")
	set("0", "metrics", "bindAddress")
	set(kueue.Namespace, "namespace")
	// In a pod, the namespace of its service account.
	set(kueue.Namespace, "leaderElection", "resourceNamespace")
	if err != nil {
		return err
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(r.kueueDir(), "certs"), 0o700); err != nil {
		return err
	}
	return os.WriteFile(r.kueueConfig(), data, 0o600)
}

func (r *Runtime) pidFile(component string) string {
	return filepath.Join(r.clusterDir(), "pids", component+".pid")
}

// startKueue starts the manager in a session of its own, logging to
// <cluster>/logs/kueue.log, and records its pid.
func (r *Runtime) startKueue() error {
	logDir := filepath.Join(r.clusterDir(), "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(r.pidFile(kueue.Component)), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(logDir, kueue.Component+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(r.bin(kueue.Component),
		"--config="+r.kueueConfig(),
		"--kubeconfig="+filepath.Join(r.clusterDir(), "kubeconfig.yaml"),
		"--feature-gates="+kueue.FeatureGates,
		"--zap-log-level=2")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting Kueue's manager: %w", err)
	}
	// Reap it should it exit while this process lives, so that a dead
	// manager is not taken for a running one.
	go func() { _ = cmd.Wait() }()
	return os.WriteFile(r.pidFile(kueue.Component), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

// stopKueue stops a running manager (SIGTERM, then SIGKILL).
func (r *Runtime) stopKueue(ctx context.Context) error {
	pid, err := readPid(r.pidFile(kueue.Component))
	if err != nil || gone(pid) {
		return nil
	}
	return stopProcess(ctx, pid, syscall.SIGTERM)
}
