package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
)

var _ cluster.ComponentRouter = &Runtime{}

// routed are the components that reach kube-apiserver through the
// cluster's kubeconfig.yaml (kwokctl's, and the runtime's for
// gantry-provisioner and Kueue), in the order they are restarted.
// kwok-controller reads it too, but plays the nodes' kubelets rather than a
// part of the control plane: it is left running, straight to kube-apiserver.
// (Restarted onto the soak's fault proxy, kwok v0.8.0 did no work for its
// first 3m20s, in both runs that did so, and victims with a grace period
// stayed that long; whether the restart or the proxy is the cause is not
// established.)
var routed = []string{"kube-controller-manager", "kube-scheduler", "gantry-provisioner", kueue.Component}

// componentsKubeconfig is the kubeconfig every routed component reads;
// directKubeconfig keeps it as kwokctl wrote it while the components are
// routed elsewhere.
func (r *Runtime) componentsKubeconfig() string {
	return filepath.Join(r.clusterDir(), "kubeconfig.yaml")
}

func (r *Runtime) directKubeconfig() string {
	return filepath.Join(r.clusterDir(), "kubeconfig.direct.yaml")
}

// RouteComponents implements cluster.ComponentRouter: it rewrites the
// server of the kubeconfig the components read (the admin's credentials
// stay: the server presents its own to kube-apiserver, or passes them on)
// and restarts each. The kubeconfig users and tests are given
// (Options.KubeconfigPath) is a copy made when the cluster was created: it
// still reaches kube-apiserver straight.
func (r *Runtime) RouteComponents(ctx context.Context, server string) ([]string, error) {
	direct, err := os.ReadFile(r.directKubeconfig())
	switch {
	case errors.Is(err, os.ErrNotExist):
		if direct, err = os.ReadFile(r.componentsKubeconfig()); err != nil {
			return nil, err
		}
		if server == "" {
			return nil, nil // routed straight already
		}
		if err := os.WriteFile(r.directKubeconfig(), direct, 0o600); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	data := direct
	if server != "" {
		cfg, err := clientcmd.Load(direct)
		if err != nil {
			return nil, fmt.Errorf("reading the components' kubeconfig: %w", err)
		}
		for _, c := range cfg.Clusters {
			c.Server = server
			c.InsecureSkipTLSVerify = true
			c.CertificateAuthority, c.CertificateAuthorityData = "", nil
		}
		if data, err = clientcmd.Write(*cfg); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(r.componentsKubeconfig(), data, 0o600); err != nil {
		return nil, err
	}
	if server == "" {
		if err := os.Remove(r.directKubeconfig()); err != nil {
			return nil, err
		}
	}
	var restarted []string
	for _, c := range routed {
		if !slices.Contains(r.Components(), c) || !alive(r.pidFile(c)) {
			continue // not in this cluster, or stopped: it reads the file when it starts
		}
		if err := r.RestartComponent(ctx, c, syscall.SIGTERM); err != nil {
			return restarted, fmt.Errorf("restarting %s onto %s: %w", c, serverOrDirect(server), err)
		}
		restarted = append(restarted, c)
	}
	return restarted, nil
}

func serverOrDirect(server string) string {
	if server == "" {
		return "kube-apiserver"
	}
	return server
}
