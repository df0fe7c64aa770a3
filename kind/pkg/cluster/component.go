package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
)

// ComponentClient is implemented by runtimes that can call a control-plane
// component's own HTTP endpoints (e.g. kube-scheduler's secure port) with
// the credentials they scrape its metrics with.
type ComponentClient interface {
	// ComponentRequest sends method path (with body, if not nil) to the
	// component and returns the response status code and body.
	ComponentRequest(ctx context.Context, component, method, path string, body []byte) (int, []byte, error)
}

// ComponentRestarter is implemented by runtimes that can restart one
// control-plane component of a running cluster, as a crash or an upgrade
// would: the process is signalled, and once it is gone a new one is
// started with the same configuration.
type ComponentRestarter interface {
	// RestartComponent stops component with sig (SIGTERM lets it shut down
	// gracefully, SIGKILL is a crash) and starts it again. It returns once
	// the new process runs; it does not wait for the component to serve.
	RestartComponent(ctx context.Context, component string, sig syscall.Signal) error
}

// ReplicaRestarter is implemented by runtimes whose components may run as
// several replicas (the kind runtime's Deployments, such as
// gantry-webhook): RestartComponent restarts one of them, RestartReplicas
// every one at once, as a crash of the whole component would.
type ReplicaRestarter interface {
	// RestartReplicas stops every running replica of component with sig
	// and returns, with how many it stopped, once as many new ones run.
	RestartReplicas(ctx context.Context, component string, sig syscall.Signal) (int, error)
}

// ComponentHTTPError is a component's answer other than 2xx.
type ComponentHTTPError struct {
	Component, Method, Path string
	StatusCode              int
	Body                    string
}

func (e *ComponentHTTPError) Error() string {
	return fmt.Sprintf("%s %s %s: %d %s: %s", e.Component, e.Method, e.Path, e.StatusCode,
		http.StatusText(e.StatusCode), strings.TrimSpace(e.Body))
}

// ComponentGet returns the body of GET path on component; an answer other
// than 2xx is a *ComponentHTTPError.
func (c *Cluster) ComponentGet(ctx context.Context, component, path string) ([]byte, error) {
	return c.componentDo(ctx, component, http.MethodGet, path, nil)
}

// ComponentPut sends body to path on component with PUT and returns the
// answer's body; an answer other than 2xx is a *ComponentHTTPError.
func (c *Cluster) ComponentPut(ctx context.Context, component, path string, body []byte) ([]byte, error) {
	return c.componentDo(ctx, component, http.MethodPut, path, body)
}

func (c *Cluster) componentDo(ctx context.Context, component, method, path string, body []byte) ([]byte, error) {
	cc, ok := c.runtime.(ComponentClient)
	if !ok {
		return nil, &NotSupportedError{Runtime: c.runtime.Name(), Reason: "it cannot call component endpoints"}
	}
	code, out, err := cc.ComponentRequest(ctx, component, method, path, body)
	if err != nil {
		return nil, err
	}
	if code < 200 || code > 299 {
		return out, &ComponentHTTPError{Component: component, Method: method, Path: path, StatusCode: code, Body: string(out)}
	}
	return out, nil
}

// RestartComponent restarts one control-plane component; see
// ComponentRestarter.
func (c *Cluster) RestartComponent(ctx context.Context, component string, sig syscall.Signal) error {
	r, ok := c.runtime.(ComponentRestarter)
	if !ok {
		return &NotSupportedError{Runtime: c.runtime.Name(), Reason: "it cannot restart a single component"}
	}
	return r.RestartComponent(ctx, component, sig)
}

// RestartReplicas restarts every replica of a component at once; see
// ReplicaRestarter.
func (c *Cluster) RestartReplicas(ctx context.Context, component string, sig syscall.Signal) (int, error) {
	r, ok := c.runtime.(ReplicaRestarter)
	if !ok {
		return 0, &NotSupportedError{Runtime: c.runtime.Name(), Reason: "it runs no component as several replicas"}
	}
	return r.RestartReplicas(ctx, component, sig)
}
