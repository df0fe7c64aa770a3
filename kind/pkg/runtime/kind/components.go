package kind

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kindnodes "sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// component is a control-plane component, by the name of its container on
// the control-plane node, where all of them run: kubeadm's static pods and
// Gantry's workloads (pinned there, see kind/config/addons).
type component struct {
	name      string
	container string
	// endpoint is the component's own HTTP(S) server on the node's
	// loopback, for metrics and Gantry's endpoints; empty when it has none
	// reachable that way.
	endpoint string
	// lease, namespace/name, is the leader lease of a Deployment with
	// several replicas: its logs, restarts and requests are the leader's,
	// and requests go to the leader pod's address on port.
	lease string
	port  int
}

var components = []component{
	{name: "etcd", container: "etcd", endpoint: "http://127.0.0.1:2381"},
	{name: "kube-apiserver", container: "kube-apiserver", endpoint: "https://127.0.0.1:6443"},
	{name: "kube-controller-manager", container: "kube-controller-manager", endpoint: "https://127.0.0.1:10257"},
	{name: "kube-scheduler", container: "kube-scheduler", endpoint: "https://127.0.0.1:10259"},
	{name: "kwok-controller", container: "kwok-controller"},
	{name: "gantry-provisioner", container: "provisioner", lease: "gantry-system/gantry-provisioner", port: 8443},
}

// stockComponents are what the stock control plane adds: Gantry's
// scheduler and webhook as Deployments (config/overlays/managed). Their
// servers listen in the pods' network, not the node's.
var stockComponents = []component{
	{name: "gantry-scheduler", container: "gantry-scheduler", lease: "gantry-system/gantry-scheduler", port: 10259},
	{name: "gantry-webhook", container: "webhook"},
}

// components are the cluster's components: the static pods, then the
// Deployments, all on the control-plane node.
func (r *Runtime) components() []component {
	out := components
	if r.plane == cluster.ControlPlaneStock {
		out = append(slices.Clone(out), stockComponents...)
	}
	if r.hasKueue() {
		out = append(slices.Clone(out), kueueComponent)
	}
	return out
}

func (r *Runtime) lookup(name string) (component, error) {
	for _, c := range r.components() {
		if c.name == name {
			return c, nil
		}
	}
	return component{}, fmt.Errorf("unknown component %q: the kind runtime runs %s", name, strings.Join(r.Components(), ", "))
}

// nodeContainer is a container of the control-plane node's container
// runtime, as kubelet names it.
type nodeContainer struct {
	ID, Name string
	// Pod is the name of the container's pod.
	Pod     string
	Running bool
	// Log is the container's log under /var/log/containers.
	Log string
}

// listScript prints, in the control-plane node, kubelet's links to the
// container logs (named <pod>_<namespace>_<container>-<id>.log), newest
// first, and containerd's tasks of Kubernetes' namespace with their status.
// The node image has ctr, not crictl.
const listScript = `cd /var/log/containers && ls -t | sed 's/^/log /'
ctr -n k8s.io tasks ls | tail -n +2 | sed 's/^/task /'`

var containerLog = regexp.MustCompile(`^([^_]+)_[^_]+_(.+)-([0-9a-f]{64})\.log$`)

// parseContainers reads listScript's output: the containers newest first.
func parseContainers(out string) []nodeContainer {
	running := map[string]bool{}
	var list []nodeContainer
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 4 && fields[0] == "task":
			running[fields[1]] = fields[3] == "RUNNING"
		case len(fields) == 2 && fields[0] == "log":
			if m := containerLog.FindStringSubmatch(fields[1]); m != nil {
				list = append(list, nodeContainer{ID: m[3], Name: m[2], Pod: m[1], Log: "/var/log/containers/" + fields[1]})
			}
		}
	}
	for i := range list {
		list[i].Running = running[list[i].ID]
	}
	return list
}

// containers lists the containers of the control-plane node, newest first.
func (r *Runtime) containers(ctx context.Context) ([]nodeContainer, error) {
	cp, err := r.cp()
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := cp.CommandContext(ctx, "sh", "-c", listScript).SetStdout(&out).Run(); err != nil {
		return nil, r.kindError("listing the containers of "+r.controlPlane(), err)
	}
	return parseContainers(out.String()), nil
}

// cp is the control-plane node; commands in it run with `docker exec`.
func (r *Runtime) cp() (kindnodes.Node, error) {
	ns, err := r.nodes()
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if n.String() == r.controlPlane() {
			return n, nil
		}
	}
	return nil, fmt.Errorf("cluster %q has no control-plane node %s", r.o.Name, r.controlPlane())
}

// leader returns the pod of c that holds its lease, and that pod's address;
// "" for a component without a lease.
func (r *Runtime) leader(ctx context.Context, c component) (pod, ip string, err error) {
	if c.lease == "" {
		return "", "", nil
	}
	ns, name, _ := strings.Cut(c.lease, "/")
	cfg, err := clientcmd.BuildConfigFromFlags("", r.o.KubeconfigPath)
	if err != nil {
		return "", "", err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", "", err
	}
	lease, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("%s's leader: %w", c.name, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", "", fmt.Errorf("%s has no leader: lease %s is not held", c.name, c.lease)
	}
	// kube-scheduler's identity is <hostname>_<uuid>; a pod's hostname is
	// its name.
	pod, _, _ = strings.Cut(*lease.Spec.HolderIdentity, "_")
	p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("%s's leader: %w", c.name, err)
	}
	if p.Status.PodIP == "" {
		return "", "", fmt.Errorf("%s's leader %s has no address yet", c.name, pod)
	}
	return pod, p.Status.PodIP, nil
}

// ofComponent reports whether ct is a container of c: its name, and for a
// component with a lease, in the leader pod.
func ofComponent(ct nodeContainer, c component, leader string) bool {
	return ct.Name == c.container && (leader == "" || ct.Pod == leader)
}

// Stopped implements cluster.Runtime: the components with no running
// container on the control-plane node (all of them when the node is down).
func (r *Runtime) Stopped(ctx context.Context) ([]string, error) {
	running := map[string]bool{}
	if up, err := docker(ctx, "inspect", "--format", "{{.State.Running}}", r.controlPlane()); err == nil && up == "true" {
		list, err := r.containers(ctx)
		if err != nil {
			return nil, err
		}
		for _, c := range list {
			if c.Running {
				running[c.Name] = true
			}
		}
	}
	var out []string
	for _, c := range r.components() {
		if !running[c.container] {
			out = append(out, c.name)
		}
	}
	return out, nil
}

// LogTail implements cluster.Runtime: the log of the component's newest
// container (the leader's, for a component with a lease that is held), or
// kind's own log for "kind".
func (r *Runtime) LogTail(name string, lines int) (string, error) {
	if name == "kind" {
		data, err := os.ReadFile(r.log.path)
		return tail(string(data), lines), err
	}
	c, err := r.lookup(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A component that failed to start may hold no lease: its newest
	// container's log says why.
	leader, _, err := r.leader(ctx, c)
	if err != nil {
		leader = ""
	}
	list, err := r.containers(ctx)
	if err != nil {
		return "", err
	}
	for _, ct := range list {
		if !ofComponent(ct, c, leader) {
			continue
		}
		cp, err := r.cp()
		if err != nil {
			return "", err
		}
		var out bytes.Buffer
		err = cp.CommandContext(ctx, "tail", "-n", strconv.Itoa(lines), ct.Log).SetStdout(&out).Run()
		return criLogText(out.String()), err
	}
	return "", fmt.Errorf("%s has no container on %s", name, r.controlPlane())
}

// requestScript calls a component's endpoint from inside the control-plane
// node and prints the body and then the status code on a line of its own.
// It calls as the cluster's admin (the client certificate of kubeadm's
// admin.conf) when its first argument is "admin", or as the identity of
// the bearer token on the first line of its input when it is "token"; the
// credentials go to a file only the call's shell reads, removed when it
// exits. The rest of the input is the request's body when the fourth
// argument is not empty. -k: the components' serving certificates are
// self-signed, and the connection never leaves the node's loopback.
const requestScript = `set -eu
umask 077
creds=$(mktemp); trap 'rm -f "$creds"' EXIT
if [ "$1" = token ]; then
  IFS= read -r token
  printf 'Authorization: Bearer %s\n' "$token" >"$creds"
  auth="-H @$creds"
else
  for k in client-certificate-data client-key-data; do
    sed -n "s/^ *$k: *//p" /etc/kubernetes/admin.conf | base64 -d >>"$creds"
  done
  auth="--cert $creds"
fi
curl -sS -k $auth -X "$2" -w '\n%{http_code}' "$3" ${4:+--data-binary @-}`

// ComponentRequest implements cluster.ComponentClient.
func (r *Runtime) ComponentRequest(ctx context.Context, name, method, path string, body []byte) (int, []byte, error) {
	return r.request(ctx, name, "", method, path, body)
}

// ComponentRequestAs is ComponentRequest as the identity of a bearer token
// (e.g. a ServiceAccount's), for tests of what the component lets others do.
func (r *Runtime) ComponentRequestAs(ctx context.Context, name, token, method, path string, body []byte) (int, []byte, error) {
	if token == "" || strings.ContainsAny(token, "\r\n") {
		return 0, nil, fmt.Errorf("ComponentRequestAs %s %s: no token, or not one line", method, path)
	}
	return r.request(ctx, name, token, method, path, body)
}

// request runs requestScript as the admin, or as token when it is not "".
func (r *Runtime) request(ctx context.Context, name, token, method, path string, body []byte) (int, []byte, error) {
	c, err := r.lookup(name)
	if err != nil {
		return 0, nil, err
	}
	endpoint := c.endpoint
	if c.lease != "" && c.port != 0 {
		_, ip, err := r.leader(ctx, c)
		if err != nil {
			return 0, nil, err
		}
		endpoint = "https://" + net.JoinHostPort(ip, strconv.Itoa(c.port))
	}
	if endpoint == "" {
		return 0, nil, &cluster.NotSupportedError{Runtime: Name, Reason: name + "'s endpoints are not reachable from its node"}
	}
	as, withBody := "admin", ""
	var in []byte
	if token != "" {
		as, in = "token", []byte(token+"\n")
	}
	if body != nil {
		withBody, in = "body", append(in, body...)
	}
	cp, err := r.cp()
	if err != nil {
		return 0, nil, err
	}
	var out, errOut bytes.Buffer
	cmd := cp.CommandContext(ctx, "sh", "-c", requestScript, "request", as, method, endpoint+path, withBody).
		SetStdout(&out).SetStderr(&errOut)
	if in != nil {
		cmd.SetStdin(bytes.NewReader(in))
	}
	if err := cmd.Run(); err != nil {
		return 0, nil, fmt.Errorf("%s %s%s: %w: %s", method, name, path, err, strings.TrimSpace(errOut.String()))
	}
	code, resp, err := splitStatus(out.Bytes())
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s%s: %w", method, name, path, err)
	}
	return code, resp, nil
}

// splitStatus splits requestScript's output into the body and the status
// code curl printed after it.
func splitStatus(data []byte) (int, []byte, error) {
	i := bytes.LastIndexByte(data, '\n')
	if i < 0 {
		return 0, nil, fmt.Errorf("no status in curl's output %q", data)
	}
	code, err := strconv.Atoi(string(data[i+1:]))
	if err != nil || code < 100 || code > 599 {
		return 0, nil, fmt.Errorf("curl printed status %q", data[i+1:])
	}
	return code, data[:i], nil
}

// Metrics implements cluster.Runtime.
func (r *Runtime) Metrics(ctx context.Context, name string) (string, error) {
	code, body, err := r.ComponentRequest(ctx, name, "GET", "/metrics", nil)
	if err != nil {
		return "", err
	}
	if code != 200 {
		return "", &cluster.ComponentHTTPError{Component: name, Method: "GET", Path: "/metrics", StatusCode: code, Body: string(body)}
	}
	return string(body), nil
}

// RestartComponent implements cluster.ComponentRestarter: containerd
// signals the component's running container (the leader's, for a
// component with a lease; the newest replica's otherwise), and kubelet
// starts a new one once it has exited, as after a crash.
func (r *Runtime) RestartComponent(ctx context.Context, name string, sig syscall.Signal) error {
	_, err := r.restart(ctx, name, sig, false)
	return err
}

// RestartReplicas implements cluster.ReplicaRestarter: every running
// container of the component, in all its replicas, is signalled at once,
// and it returns once kubelet has started as many new ones.
func (r *Runtime) RestartReplicas(ctx context.Context, name string, sig syscall.Signal) (int, error) {
	return r.restart(ctx, name, sig, true)
}

// restart signals one running container of the component (see
// RestartComponent) or, with all, every one of them, and waits until as
// many new ones run; it returns how many it signalled.
func (r *Runtime) restart(ctx context.Context, name string, sig syscall.Signal, all bool) (int, error) {
	c, err := r.lookup(name)
	if err != nil {
		return 0, err
	}
	switch sig {
	case syscall.SIGTERM, syscall.SIGKILL:
	default:
		return 0, fmt.Errorf("restarting %s: signal %v: want SIGTERM or SIGKILL", name, sig)
	}
	leader := ""
	if !all {
		if leader, _, err = r.leader(ctx, c); err != nil {
			return 0, err
		}
	}
	list, err := r.containers(ctx)
	if err != nil {
		return 0, err
	}
	var old []string
	for _, ct := range list {
		if ofComponent(ct, c, leader) && ct.Running {
			old = append(old, ct.ID)
			if !all {
				break
			}
		}
	}
	if len(old) == 0 {
		return 0, fmt.Errorf("restarting %s: it has no running container", name)
	}
	cp, err := r.cp()
	if err != nil {
		return 0, err
	}
	for _, id := range old {
		if err := cp.CommandContext(ctx, "ctr", "-n", "k8s.io", "tasks", "kill", "--signal", unix.SignalName(sig), id).Run(); err != nil {
			return 0, r.kindError("stopping "+name, err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, r.timeout(), false, func(ctx context.Context) (bool, error) {
		list, err := r.containers(ctx)
		if err != nil {
			return false, nil
		}
		started := 0
		for _, ct := range list {
			if ofComponent(ct, c, leader) && ct.Running && !slices.Contains(old, ct.ID) {
				started++
			}
		}
		return started >= len(old), nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s did not start again within %s", name, r.timeout())
	}
	return len(old), nil
}

// criLogText strips the CRI log format's prefix (time, stream, tag) from
// each line.
func criLogText(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			line = f[3]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// ControlPlaneCommand implements cluster.ControlPlaneCommander with
// `docker exec` on the control-plane node.
func (r *Runtime) ControlPlaneCommand(ctx context.Context, stdin io.Reader, name string, args ...string) ([]byte, error) {
	cp, err := r.cp()
	if err != nil {
		return nil, err
	}
	var out, errOut bytes.Buffer
	cmd := cp.CommandContext(ctx, name, args...).SetStdout(&out).SetStderr(&errOut)
	if stdin != nil {
		cmd.SetStdin(stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s on %s: %w: %s", name, strings.Join(args, " "), r.controlPlane(), err, strings.TrimSpace(errOut.String()))
	}
	return out.Bytes(), nil
}
