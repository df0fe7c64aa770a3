package local

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// kwokctlConfig is the part of kwokctl's kwok.yaml this runtime reads: where
// each component serves its metrics.
type kwokctlConfig struct {
	Kind       string `json:"kind"`
	Components []struct {
		Name   string    `json:"name"`
		Metric *endpoint `json:"metric"`
	} `json:"components"`
}

// endpoint is where, and with which client certificate, a component serves
// its metrics.
type endpoint struct {
	Scheme             string `json:"scheme"`
	Host               string `json:"host"`
	Path               string `json:"path"`
	CertPath           string `json:"certPath"`
	KeyPath            string `json:"keyPath"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify"`
}

// metricsEndpoint reads the component's metrics endpoint from kwokctl's
// configuration.
func (r *Runtime) metricsEndpoint(component string) (*endpoint, error) {
	data, err := os.ReadFile(filepath.Join(r.clusterDir(), "kwok.yaml"))
	if err != nil {
		return nil, fmt.Errorf("reading kwokctl's configuration: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var doc kwokctlConfig
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("component %q has no metrics endpoint in kwokctl's configuration", component)
			}
			return nil, fmt.Errorf("parsing kwokctl's configuration: %w", err)
		}
		if doc.Kind != "KwokctlConfiguration" {
			continue
		}
		for _, c := range doc.Components {
			if c.Name == component && c.Metric != nil {
				return c.Metric, nil
			}
		}
	}
}

// do sends method path to the component's metrics server, with the
// cluster's admin certificate when kwokctl scrapes it with one.
func (r *Runtime) do(ctx context.Context, component, method, path string, body []byte) (int, []byte, error) {
	return r.doAs(ctx, component, "", method, path, body)
}

// doAs is do with a bearer token instead of the admin certificate when
// token is not empty.
func (r *Runtime) doAs(ctx context.Context, component, token, method, path string, body []byte) (int, []byte, error) {
	ep, err := r.metricsEndpoint(component)
	if err != nil {
		return 0, nil, err
	}
	// The component serves a certificate of kwokctl's own CA; the
	// endpoint is on loopback, so it is verified by address.
	tlsConfig := &tls.Config{InsecureSkipVerify: ep.InsecureSkipVerify} //nolint:gosec
	if ep.CertPath != "" && token == "" {
		cert, err := tls.LoadX509KeyPair(ep.CertPath, ep.KeyPath)
		if err != nil {
			return 0, nil, err
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	// One request per client: no idle connection outlives the call.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}}
	url := fmt.Sprintf("%s://%s%s", ep.Scheme, ep.Host, path)
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, out, nil
}

// Metrics implements cluster.Runtime: it scrapes the component's metrics
// endpoint with the cluster's admin certificate.
func (r *Runtime) Metrics(ctx context.Context, component string) (string, error) {
	ep, err := r.metricsEndpoint(component)
	if err != nil {
		return "", err
	}
	code, body, err := r.do(ctx, component, http.MethodGet, ep.Path, nil)
	if err != nil {
		return "", fmt.Errorf("scraping %s metrics: %w", component, err)
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("scraping %s metrics at %s%s: %d %s", component, ep.Host, ep.Path, code, http.StatusText(code))
	}
	return string(body), nil
}

// ComponentRequestAs is ComponentRequest as the identity of a bearer token
// (e.g. a ServiceAccount's), for tests of what the component lets others do.
func (r *Runtime) ComponentRequestAs(ctx context.Context, component, token, method, path string, body []byte) (int, []byte, error) {
	if token == "" {
		return 0, nil, fmt.Errorf("ComponentRequestAs %s %s: no token", method, path)
	}
	return r.doAs(ctx, component, token, method, path, body)
}

// ComponentRequest implements cluster.ComponentClient: any path of the
// server the component's metrics are scraped from, with the same
// credentials.
func (r *Runtime) ComponentRequest(ctx context.Context, component, method, path string, body []byte) (int, []byte, error) {
	return r.do(ctx, component, method, path, body)
}
