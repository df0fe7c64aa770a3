// Command faultproxy runs a fault proxy (test/faultproxy) on a cluster's
// node, between in-cluster clients and kube-apiserver: it serves TLS on
// --listen with a certificate the cluster's CA signs for --ip, passes each
// request on to --upstream with its client's own credentials, and is
// ruled through its control API on --control (a loopback address). The
// soak test (e2e/soak) runs it on a kind cluster's control-plane node. It
// is a test tool, never part of a release.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/test/faultproxy"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "faultproxy:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("faultproxy", flag.ContinueOnError)
	listen := fs.String("listen", "", "address to serve the proxy on, host:port")
	control := fs.String("control", "127.0.0.1:16444", "loopback address of the control API")
	upstream := fs.String("upstream", "https://127.0.0.1:6443", "kube-apiserver's URL")
	caCert := fs.String("ca-cert", "/etc/kubernetes/pki/ca.crt", "the cluster's CA certificate: kube-apiserver is verified with it, and the proxy's certificate signed by it")
	caKey := fs.String("ca-key", "/etc/kubernetes/pki/ca.key", "the cluster's CA key")
	ip := fs.String("ip", "", "the address clients reach the proxy at, for its certificate")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr := net.ParseIP(*ip)
	if *listen == "" || addr == nil {
		return errors.New("--listen and --ip are required")
	}
	if host, _, err := net.SplitHostPort(*control); err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("--control %q: want a loopback host:port (the control API has no authentication)", *control)
	}
	certPEM, err := os.ReadFile(*caCert)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(*caKey)
	if err != nil {
		return err
	}
	cert, err := faultproxy.SignedCertificate(certPEM, keyPEM, []net.IP{addr})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	p, err := faultproxy.NewWithOptions(&rest.Config{Host: *upstream, TLSClientConfig: rest.TLSClientConfig{CAFile: *caCert}},
		faultproxy.Options{Listener: l, Certificate: cert, ForwardCredentials: true})
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Printf("proxying %s to %s; control API on %s\n", p.URL(), *upstream, *control)
	srv := &http.Server{Addr: *control, Handler: p.ControlHandler(), ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}
