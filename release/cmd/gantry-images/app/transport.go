package app

import (
	"crypto/tls"
	"net/http"
)

func insecureTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // only with --insecure, for a test registry
	return t
}
