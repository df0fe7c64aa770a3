package framework

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// PortForwarder forwards ports of 127.0.0.1 to ports of one pod through
// the API server (the pods/portforward subresource, as kubectl
// port-forward), so that a spec reaches a pod's servers whichever node
// runs it.
type PortForwarder struct {
	// Local are the local ports, in the order of the pod's ports given.
	Local []int
	stop  chan struct{}
	done  chan struct{}
	// mu guards errs, the forwarder's error output.
	mu   sync.Mutex
	errs bytes.Buffer
}

// PortForward starts forwarding to ports of pod ns/name and returns once
// the local ports listen; Close stops it.
func PortForward(ctx context.Context, ns, name string, ports ...int) (*PortForwarder, error) {
	cfg := TestContext.Config
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	url := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	specs := make([]string, len(ports))
	for i, p := range ports {
		specs[i] = "0:" + strconv.Itoa(p)
	}
	pf := &PortForwarder{stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, specs, pf.stop, ready, nil, pf)
	if err != nil {
		return nil, err
	}
	var runErr error
	go func() {
		defer close(pf.done)
		runErr = fw.ForwardPorts()
	}()
	select {
	case <-ready:
	case <-pf.done:
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", ns, name, runErr)
	case <-ctx.Done():
		pf.Close()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		pf.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s not ready within 30s: %s", ns, name, pf.Errors())
	}
	forwarded, err := fw.GetPorts()
	if err != nil {
		pf.Close()
		return nil, err
	}
	for _, p := range forwarded {
		pf.Local = append(pf.Local, int(p.Local))
	}
	return pf, nil
}

// Write collects what the forwarder reports as errors (a connection the
// pod refused, say), for Errors.
func (pf *PortForwarder) Write(p []byte) (int, error) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.errs.Len() < 64<<10 {
		pf.errs.Write(p)
	}
	return len(p), nil
}

// Errors is the forwarder's error output so far.
func (pf *PortForwarder) Errors() string {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return pf.errs.String()
}

// Close stops forwarding and waits until the local ports are closed.
func (pf *PortForwarder) Close() {
	select {
	case <-pf.stop:
	default:
		close(pf.stop)
	}
	<-pf.done
}
