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
		Name   string `json:"name"`
		Metric *struct {
			Scheme             string `json:"scheme"`
			Host               string `json:"host"`
			Path               string `json:"path"`
			CertPath           string `json:"certPath"`
			KeyPath            string `json:"keyPath"`
			InsecureSkipVerify bool   `json:"insecureSkipVerify"`
		} `json:"metric"`
	} `json:"components"`
}

// Metrics implements cluster.Runtime: it scrapes the component's metrics
// endpoint with the cluster's admin certificate.
func (r *Runtime) Metrics(ctx context.Context, component string) (string, error) {
	data, err := os.ReadFile(filepath.Join(r.clusterDir(), "kwok.yaml"))
	if err != nil {
		return "", fmt.Errorf("reading kwokctl's configuration: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var doc kwokctlConfig
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return "", fmt.Errorf("component %q has no metrics endpoint in kwokctl's configuration", component)
			}
			return "", fmt.Errorf("parsing kwokctl's configuration: %w", err)
		}
		if doc.Kind != "KwokctlConfiguration" {
			continue
		}
		for _, c := range doc.Components {
			if c.Name != component || c.Metric == nil {
				continue
			}
			// The component serves a certificate of kwokctl's own CA; the
			// endpoint is on loopback, so it is verified by address.
			tlsConfig := &tls.Config{InsecureSkipVerify: c.Metric.InsecureSkipVerify} //nolint:gosec
			if c.Metric.CertPath != "" {
				cert, err := tls.LoadX509KeyPair(c.Metric.CertPath, c.Metric.KeyPath)
				if err != nil {
					return "", err
				}
				tlsConfig.Certificates = []tls.Certificate{cert}
			}
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
			url := fmt.Sprintf("%s://%s%s", c.Metric.Scheme, c.Metric.Host, c.Metric.Path)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return "", err
			}
			resp, err := client.Do(req)
			if err != nil {
				return "", fmt.Errorf("scraping %s metrics: %w", component, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return "", err
			}
			if resp.StatusCode != http.StatusOK {
				return "", fmt.Errorf("scraping %s metrics at %s: %s", component, url, resp.Status)
			}
			return string(body), nil
		}
	}
}
